package outbox

import "errors"

// PermanentError marks a publication failure that retrying cannot mend:
// the broker refused the message for itself (too large, a destination that
// does not exist, not authorised). A [Relay] moves a row whose publication
// failed with one to the dead rows at once, instead of retrying it; see
// [Dead] and [Redrive]. Publishers return it through [Permanent].
type PermanentError struct {
	Err error
}

// Permanent wraps err as a [*PermanentError], for a [Publisher] to say that
// publishing the message again would fail again. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the failure.
func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err, or an error it wraps, is a
// [*PermanentError].
func IsPermanent(err error) bool {
	_, ok := errors.AsType[*PermanentError](err)
	return ok
}

// UnavailableError marks a publication failure that says nothing about the
// message: the broker could not be reached, or did not answer (a dial
// error, a lost connection, a timeout, a cluster without a leader). A
// [Relay] does not count it as an attempt of the message and gives the row
// no backoff of its own: the relay backs off as a whole, for as long as
// the broker stays away, and no row dies of a broker outage however long.
// Publishers return it through [Unavailable]; any other failure counts as
// an attempt (see RelayConfig.MaxAttempts).
type UnavailableError struct {
	Err error
}

// Unavailable wraps err as an [*UnavailableError], for a [Publisher] to say
// that the broker could not take the message now, whatever the message.
// Unavailable(nil) is nil. An error that is also a [*PermanentError] is
// permanent.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &UnavailableError{Err: err}
}

func (e *UnavailableError) Error() string { return "unavailable: " + e.Err.Error() }

// Unwrap returns the failure.
func (e *UnavailableError) Unwrap() error { return e.Err }

// IsUnavailable reports whether err, or an error it wraps, is an
// [*UnavailableError]. (The database's [ErrUnavailable] is not one: the
// relay reconnects after it.)
func IsUnavailable(err error) bool {
	_, ok := errors.AsType[*UnavailableError](err)
	return ok
}
