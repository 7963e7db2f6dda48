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
	msgs := make([]Message, 0, len(rows))
	ok := make([]row, 0, len(rows)) // the rows handed to the Publisher
	var (
		blocked     map[string]bool
		undecodable int
		firstErr    error
	)
	for _, rw := range rows {
		switch {
		case blocked[rw.msg.Key]:
		case rw.err != nil:
			r.noteFailed(rw.id, rw.err)
			undecodable++
			if firstErr == nil {
				firstErr = rw.err
			}
			if rw.msg.Key == "" {
				break // unkeyed: ordered with no other message
			}
			if blocked == nil {
				blocked = map[string]bool{}
			}
			blocked[rw.msg.Key] = true
		default:
			msgs = append(msgs, rw.msg)
			ok = append(ok, rw)
		}
	}
	var (
		errs            []error
		whole, timedOut bool
	)
	start := time.Now()
	if len(msgs) > 0 {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
		errs, whole = failures(len(msgs), r.pub.Publish(pctx, msgs))
		timedOut = pctx.Err() != nil
		cancel()
	}
	elapsed := time.Since(start)
	sent, failed, unavailable, charged := 0, undecodable, 0, undecodable
	for i, err := range errs {
		if err == nil {
			r.pending.sent = append(r.pending.sent, ok[i].id)
			sent++
			continue
		}
		failed++
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil { // not a failure of the message's: Run is ending
			continue
		}
		key := ok[i].msg.Key
		switch {
		case brokerUnavailable(err, whole && timedOut):
			unavailable++ // not the message's failure: no attempt, no backoff of its own
		case errors.Is(err, ErrHeldBack) || key != "" && blocked[key] && !IsPermanent(err):
			continue // behind a failure of its key; a permanent one is its own
		default:
			r.noteFailed(ok[i].id, err)
			charged++
		}
		if key != "" {
			if blocked == nil {
				blocked = map[string]bool{}
			}
			blocked[key] = true
		}
	}
	if ctx.Err() != nil {
		return false
	}
	r.observe(ctx, Event{Op: OpPublish, Sent: sent, Failed: failed, Unavailable: unavailable, Duration: elapsed, Err: firstErr})
	if sent > 0 {
		s.published = true
		s.failures = 0
		return failed == 0
	}
	if unavailable == 0 && !whole && charged > 0 {
		// The broker answered, refusing messages each for itself: every
		// failed key has a row charged, which waits out its own backoff
		// (or is dead), and the next read passes its key by. Waiting here
		// would hold back the other keys for a few poison rows.
		r.cfg.Logger.WarnContext(ctx, "outbox: the broker refused messages; each waits out its own backoff",
			slog.String("table", r.t.name), slog.Int("messages", failed), slog.Any("error", firstErr))
		return false
	}
	wait := r.backoff(s.failures)
	s.failures++
	s.retryAt = time.Now().Add(wait)
	msg := "outbox: publishing failed; backing off"
	if unavailable == failed {
		msg = "outbox: the broker is unavailable; backing off (no attempt counted)"
	}
	r.cfg.Logger.WarnContext(ctx, msg, slog.String("table", r.t.name), slog.Int("messages", failed),
		slog.Int("unavailable", unavailable), slog.Duration("for", wait), slog.Any("error", firstErr))
	r.observe(ctx, Event{Op: OpBackoff, Duration: wait, Err: firstErr})
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
