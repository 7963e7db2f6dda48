package idemamqp

import "time"

// WithPublishTimeout sets how long a publish of the consumer waits for the
// broker's confirm (10s otherwise), for tests of a broker that does not
// answer in time.
func WithPublishTimeout(d time.Duration) Option { return func(o *options) { o.pubTimeout = d } }
