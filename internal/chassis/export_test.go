package chassis

import "time"

// The defaults, for the tests.
const (
	DefaultRetryFirst   = defaultRetryFirst
	DefaultRetryLongest = defaultRetryLongest
	DefaultBusyDelay    = defaultBusyDelay
	DefaultDrainTimeout = defaultDrainTimeout
)

// RetryBackoff returns the first and the longest pause before a retry.
func (o *Options[M]) RetryBackoff() (first, longest time.Duration) { return o.retryFirst, o.retryLast }

// HeaderSize returns the size of the letter's headers as Fit counts them.
func (l *Letter) HeaderSize() int { return l.headerSize() }

// Size returns the letter's size as Fit counts it.
func (l *Letter) Size() int { return l.size() }
