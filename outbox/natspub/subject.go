package natspub

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidSubject is wrapped by the error of a message whose subject NATS
// can never take: empty, with whitespace, with an empty token ("a..b",
// ".a", "a.") or with a wildcard token ("*", ">"). A publish to it fails
// as an outbox.PermanentError.
var ErrInvalidSubject = errors.New("natspub: invalid subject")

// CheckSubject returns an error wrapping [ErrInvalidSubject] when subject
// is not one a message can be published to, else nil. It is the rule of
// NATS itself, and cheap: give it to outbox.Config.CheckDestination so that
// Enqueue refuses such a message in the caller's transaction rather than
// the relay finding it dead later.
func CheckSubject(subject string) error {
	reason := ""
	switch {
	case subject == "":
		reason = "is empty"
	case strings.ContainsAny(subject, " \t\r\n"):
		reason = "holds whitespace"
	default:
		for token := range strings.SplitSeq(subject, ".") {
			switch token {
			case "":
				reason = "has an empty token"
			case "*", ">":
				reason = "has a wildcard token"
			default:
				continue
			}
			break
		}
	}
	if reason == "" {
		return nil
	}
	return fmt.Errorf("%w: %q %s", ErrInvalidSubject, subject, reason)
}
