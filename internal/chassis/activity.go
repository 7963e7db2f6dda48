package chassis

import "github.com/idemgo/idem/consumer"

// Activity returns a, the activity of an event about one message (its
// system, destination, reason, cause and duration set), as kind: the kind
// of activity its event is, ActivityOther for one no message counter
// counts. A processed message counts as replayed when replayed; a
// discarded one was given up on when the broker refused its dead letter
// (brokerErr).
func Activity(a consumer.Activity, kind consumer.ActivityKind, replayed bool, brokerErr error) consumer.Activity {
	a.Kind, a.Messages = kind, 1
	switch kind {
	case consumer.ActivityProcessed:
		if replayed {
			a.Replayed = 1
		}
	case consumer.ActivityDiscarded:
		a.GaveUp = brokerErr != nil
	case consumer.ActivityOther, consumer.ActivityReleased:
		a.Messages = 0
	}
	return a
}
