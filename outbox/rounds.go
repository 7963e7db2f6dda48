package outbox

import (
	"context"
	"errors"
	"fmt"
)

// ErrHeldBack is the error of a message that failed for another message
// of the call, not for itself: a publisher did not send it because an
// earlier message of its key failed (sending it could have put it ahead of
// that one), or the broker refused it with a batch it shared with a
// message it refused (Kafka refuses a whole batch for one record too
// large). A [Relay] charges it no attempt and publishes it again.
var ErrHeldBack = errors.New("outbox: held back by the failure of another message")

// PublishInRounds publishes msgs with send, pipelined but in key order: in
// rounds, each holding at most one message per key, a key's messages in
// successive rounds. send gets a round's messages, sends them all before
// waiting for the broker, and returns one error per message, nil for each
// the broker accepted. A message whose key failed in an earlier round is
// not sent: its error wraps [ErrHeldBack] and the failure (not as a
// [*PermanentError]: the message itself may be fine). Unkeyed messages
// are all sent in the first round.
//
// A publisher whose broker can answer one message with an error and
// accept the next one from the same connection (NATS JetStream before a
// stream is ready, RabbitMQ with an unroutable message) uses it to keep
// the promise of [Publisher]: no later message of a key reaches the broker
// ahead of a failed one. Each round costs one wait for the broker, so a
// call with many messages of few keys is slower than one with many keys.
//
// The result is what Publish returns: nil, a [*PublishError], or ctx's
// error when it ended before anything was sent.
func PublishInRounds(ctx context.Context, msgs []Message, send func(ctx context.Context, round []Message) []error) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rounds := [][]int{}
	seen := make(map[string]int, len(msgs))
	for i, m := range msgs {
		r := 0
		if m.Key != "" {
			r = seen[m.Key]
			seen[m.Key] = r + 1
		}
		if r == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], i)
	}
	errs := make([]error, len(msgs))
	failed := map[string]error{}
	batch := make([]Message, 0, len(rounds[0]))
	for _, round := range rounds {
		batch, idx := batch[:0], make([]int, 0, len(round))
		for _, i := range round {
			if cause, ok := failed[msgs[i].Key]; ok {
				if p, ok := cause.(*PermanentError); ok {
					cause = p.Err // this message may well pass
				}
				errs[i] = fmt.Errorf("%w: %w", ErrHeldBack, cause)
				continue
			}
			batch = append(batch, msgs[i])
			idx = append(idx, i)
		}
		if len(batch) == 0 {
			continue
		}
		res := send(ctx, batch)
		for j, i := range idx {
			var err error
			if j < len(res) {
				err = res[j]
			} else {
				err = errors.New("outbox: PublishInRounds: send returned too few results")
			}
			if err != nil {
				errs[i] = err
				if msgs[i].Key != "" {
					failed[msgs[i].Key] = err
				}
			}
		}
	}
	return NewPublishError(errs)
}
