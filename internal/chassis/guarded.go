package chassis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/ahead"
)

// Claimed is a keyed message's claim ahead, as a consumer that claims its
// messages in batches ([ahead.Claimer]) holds it until a worker takes the
// message.
type Claimed struct {
	Op ahead.Op
	// OK: the claim answered for the message, and Claim is its answer;
	// otherwise it was not claimed (Run stops, or nothing claims ahead).
	OK    bool
	Claim ahead.Claim
}

// GiveBack releases the key the claim holds, if it holds one: the
// message's handler will not run on this delivery (the consumer stops,
// or lost the message).
func (c *Claimed) GiveBack() {
	if h := c.Claim.Held; h != nil {
		h.Release()
		c.Claim.Held = nil
	}
}

// RunGuarded runs a keyed message's handler, run, under the Guard, and
// returns the verdict on the message. A message whose key the claim holds
// runs on its claim, and a handler that returned nil leaves its value to
// the consumer's writer (pending, the Held to give it: the message is the
// writer's to settle, once the value is stored); one answered by its
// claim is decided at once; the others, and those whose lease was lost
// while they waited, go through DoScoped. A key the store could not claim
// is tried again, with a backoff, while the consumer holds the message (a
// broker's redelivery count, which a dead-letter policy reads, is not
// spent on a store outage), until wait, which waits out a pause, reports
// false (the consumer stops). failures returns the handler's failures in
// a row before this run, read once the run is over; attrs find the
// message in the log of a store outage. replayed says the outcome came
// from an earlier delivery.
func (o *Options[M]) RunGuarded(ctx context.Context, c Claimed, failures func() int, run func(ctx context.Context) error,
	wait func(time.Duration) bool, attrs ...slog.Attr) (v Verdict, replayed bool, pending ahead.Held) {
	var ran bool
	fn := func(ctx context.Context) ([]byte, error) {
		ran = true
		return nil, run(ctx)
	}
	switch cl := c.Claim; {
	case cl.Held != nil:
		_, err, ok := cl.Held.Run(fn)
		if ok && err == nil {
			return v, false, cl.Held
		}
		if ok {
			return o.Decide(idem.Result{}, err, failures()), false, nil
		}
	case c.OK && !cl.Later && !errors.Is(cl.Err, idem.ErrStoreUnavailable):
		res := idem.Result{Value: cl.Value, Replayed: cl.Replayed}
		return o.Decide(res, cl.Err, failures()), cl.Err == nil && cl.Replayed, nil
	}
	pause := 50 * time.Millisecond
	for {
		res, err := o.Guard().DoScoped(ctx, c.Op.Scope, c.Op.Key, c.Op.Payload, fn)
		if ran || !errors.Is(err, idem.ErrStoreUnavailable) {
			return o.Decide(res, err, failures()), err == nil && res.Replayed, nil
		}
		o.Logger().LogAttrs(ctx, slog.LevelWarn, o.Names().Pkg+": the store cannot claim the key; holding the message and trying again",
			append(attrs, slog.String("scope", c.Op.Scope), slog.String("key", c.Op.Key), slog.Duration("pause", pause), slog.Any("error", err))...)
		if !wait(pause) {
			return o.Decide(res, err, 0), false, nil
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// Identity returns what the failures of a message's handler are counted
// by, for a consumer whose broker keeps no count that fits ([Tries]): its
// scope and key, as the Guard names its operation (a duplicate fails with
// it); for a message run unguarded, which has no key, the broker's id of
// the message (id), or else its body's hash.
func Identity(scope, key, id string, body []byte) string {
	switch {
	case key != "":
		return "key\x00" + scope + "\x00" + key
	case id != "":
		return "message-id\x00" + id
	}
	sum := sha256.Sum256(body)
	return "body\x00" + hex.EncodeToString(sum[:])
}

// Drain waits until it holds every slot of slots, one per handler
// running, so that none runs and none can start; once timeout passed, it
// calls cancel (which cancels the handlers' contexts) and goes on waiting
// for them to return.
func Drain(slots chan struct{}, timeout time.Duration, cancel func()) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for held := 0; held < cap(slots); {
		select {
		case slots <- struct{}{}:
			held++
		case <-t.C:
			cancel()
		}
	}
}
