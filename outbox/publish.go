package outbox

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// publish hands rows to the Publisher, notes which were published (to
// mark with the next read) and which failed, and reports whether all were
// published. When none was because the broker could not be reached, or the
// call failed as a whole, the relay backs off as a whole; when the broker
// refused the messages each for itself, it does not (their rows wait out
// their own backoffs, see RelayConfig.MaxAttempts). A row whose headers cannot
// be decoded fails without being published, and holds back the later rows
// of its key.
//
// Of the failed messages of a key, only the first is charged a failed
// attempt (and waits out a backoff of its own, or dies): the later ones
// failed behind it, as a Publisher fails them, and are published after it.
// A later one that failed with a permanent error of its own dies too.
func (s *session) publish(ctx context.Context, rows []row) bool {
	r := s.r
	o := r.handOut(rows)
	start := time.Now()
	errs, whole, timedOut := r.send(ctx, o.msgs)
	elapsed := time.Since(start)
	r.noteOutcomes(ctx, &o, errs, whole && timedOut)
	if ctx.Err() != nil {
		return false
	}
	r.observe(ctx, Event{Op: OpPublish, Sent: o.sent, Failed: o.failed, Unavailable: o.unavailable, Duration: elapsed, Err: o.firstErr})
	return s.settle(ctx, o, whole)
}

// outcome is what became of a batch handed to the Publisher.
type outcome struct {
	msgs     []Message // the messages handed to the Publisher
	handed   []row     // their rows
	blocked  map[string]bool
	firstErr error

	sent, failed, unavailable, charged int
}

// block notes that key has a failed row: its later rows of the batch wait.
func (o *outcome) block(key string) {
	if key == "" {
		return // unkeyed: ordered with no other message
	}
	if o.blocked == nil {
		o.blocked = map[string]bool{}
	}
	o.blocked[key] = true
}

// handOut returns the outcome of rows before they are published: the rows
// whose headers cannot be decoded failed (noted, charged), and the others,
// but those of their keys after them, are to be handed to the Publisher.
func (r *Relay) handOut(rows []row) outcome {
	o := outcome{msgs: make([]Message, 0, len(rows)), handed: make([]row, 0, len(rows))}
	for _, rw := range rows {
		switch {
		case o.blocked[rw.msg.Key]:
		case rw.err != nil:
			r.noteFailed(rw.id, rw.err)
			o.failed++
			o.charged++
			if o.firstErr == nil {
				o.firstErr = rw.err
			}
			o.block(rw.msg.Key)
		default:
			o.msgs = append(o.msgs, rw.msg)
			o.handed = append(o.handed, rw)
		}
	}
	return o
}

// send calls the Publisher with msgs, if any, within PublishTimeout, and
// returns each message's failure, whether the call failed as a whole, and
// whether PublishTimeout ran out.
func (r *Relay) send(ctx context.Context, msgs []Message) (errs []error, whole, timedOut bool) {
	if len(msgs) == 0 {
		return nil, false, false
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	errs, whole = failures(len(msgs), r.pub.Publish(pctx, msgs))
	return errs, whole, pctx.Err() != nil
}

// noteOutcomes notes the handed rows published (to mark sent) or failed:
// charged an attempt when the failure is the message's own, not when the
// broker could not be reached (timedOut: the call failed as a whole once
// PublishTimeout ran out), nor behind a failure of its key.
func (r *Relay) noteOutcomes(ctx context.Context, o *outcome, errs []error, timedOut bool) {
	for i, err := range errs {
		if err == nil {
			r.pending.sent = append(r.pending.sent, o.handed[i].id)
			o.sent++
			continue
		}
		o.failed++
		if o.firstErr == nil {
			o.firstErr = err
		}
		if ctx.Err() != nil { // not a failure of the message's: Run is ending
			continue
		}
		key := o.handed[i].msg.Key
		switch {
		case brokerUnavailable(err, timedOut):
			o.unavailable++ // not the message's failure: no attempt, no backoff of its own
		case errors.Is(err, ErrHeldBack) || key != "" && o.blocked[key] && !IsPermanent(err):
			continue // behind a failure of its key; a permanent one is its own
		default:
			r.noteFailed(o.handed[i].id, err)
			o.charged++
		}
		o.block(key)
	}
}

// settle decides what follows a published batch, and reports whether all
// of it was published: nothing when some message was; nothing either when
// the broker refused the messages each for itself; otherwise the relay
// backs off as a whole.
func (s *session) settle(ctx context.Context, o outcome, whole bool) bool {
	r := s.r
	if o.sent > 0 {
		s.published = true
		s.failures = 0
		return o.failed == 0
	}
	if o.unavailable == 0 && !whole && o.charged > 0 {
		// The broker answered, refusing messages each for itself: every
		// failed key has a row charged, which waits out its own backoff
		// (or is dead), and the next read passes its key by. Waiting here
		// would hold back the other keys for a few poison rows.
		r.cfg.Logger.WarnContext(ctx, "outbox: the broker refused messages; each waits out its own backoff",
			slog.String("table", r.t.name), slog.Int("messages", o.failed), slog.Any("error", o.firstErr))
		return false
	}
	wait := r.backoff(s.failures)
	s.failures++
	s.retryAt = time.Now().Add(wait)
	msg := "outbox: publishing failed; backing off"
	if o.unavailable == o.failed {
		msg = "outbox: the broker is unavailable; backing off (no attempt counted)"
	}
	r.cfg.Logger.WarnContext(ctx, msg, slog.String("table", r.t.name), slog.Int("messages", o.failed),
		slog.Int("unavailable", o.unavailable), slog.Duration("for", wait), slog.Any("error", o.firstErr))
	r.observe(ctx, Event{Op: OpBackoff, Duration: wait, Err: o.firstErr})
	return false
}

// brokerUnavailable reports whether err, a message's failure in a Publish
// while Run goes on, says the broker could not be reached rather than
// anything of the message: the Publisher said so ([Unavailable]), or the
// message failed with a context's error (PublishTimeout ran out before the
// broker answered), or the call failed as a whole once its PublishTimeout
// had run out (timedOut). A permanent failure is never one.
func brokerUnavailable(err error, timedOut bool) bool {
	switch {
	case IsPermanent(err):
		return false
	case IsUnavailable(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return true
	}
	return timedOut
}
