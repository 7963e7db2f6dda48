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
