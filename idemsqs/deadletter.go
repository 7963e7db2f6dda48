package idemsqs

import (
	"cmp"
	"log/slog"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/chassis"
)

// The attributes a dead letter carries besides those of package consumer:
// where the message came from, so that it can be found and sent again.
const (
	HeaderQueue     = "idem-dead-letter-queue"      // the URL of the queue it was received from
	HeaderMessageID = "idem-dead-letter-message-id" // SQS's id of the message
)

// DeadLetterGroup is the message group of a dead letter on a FIFO
// dead-letter queue, for a message that had none (one of a standard
// queue).
const DeadLetterGroup = "idem-dead-letters"

// BodyLeftOut is the body of a dead letter whose original body was left
// out so that the letter fits (consumer.HeaderBodySize and
// consumer.HeaderBodySHA256 stand for it): SQS takes no empty body.
const BodyLeftOut = "(idem: the body was left out; see the idem-dead-letter-body-size and idem-dead-letter-body-sha256 attributes)"

// maxAttributes is the most message attributes SQS takes in a message.
const maxAttributes = 10

// poison settles a message that must never run again: its dead letter
// sent and the message deleted; under WithRedrivePolicy, the message left
// to the queue's redrive policy; under WithDiscardPoison, or once SQS
// refused the dead letter MaxAttempts times, the message deleted (or,
// when the queue has a redrive policy, left to it).
func (r *runner) poison(j *job, v chassis.Verdict) {
	o := &r.c.o
	attrs := []slog.Attr{slog.String("queue", r.c.queue), slog.String("scope", j.claim.Op.Scope), slog.String("key", j.ev.Key),
		slog.String("reason", string(v.Reason)), slog.Any("cause", v.Cause), slog.String("message_id", j.ev.MessageID)}
	switch {
	case o.redrive:
		delay := o.Backoff(max(j.ev.ReceiveCount, 1))
		o.Logger().LogAttrs(r.hctx, slog.LevelWarn, "idemsqs: poison left to the queue's redrive policy (WithRedrivePolicy): "+
			"visible again, until SQS moves it to the policy's dead-letter queue", append(attrs, slog.Duration("delay", delay))...)
		r.c.tries.Forget(j.id)
		r.changeVisibility(j, delay, EventRedriven)
		return
	case !o.DeadLetters():
		o.Logger().LogAttrs(r.hctx, slog.LevelWarn, "idemsqs: poison discarded (WithDiscardPoison): deleted", attrs...)
		r.c.tries.Forget(j.id)
		r.delete(j, EventDiscarded)
		return
	}
	l := r.letter(j, v)
	gaveUp, err := o.SendLetter(r.hctx, l, func() (chassis.Refusal, error) {
		ctx, cancel := r.apiContext()
		defer cancel()
		_, err := r.c.api.SendMessage(ctx, r.letterInput(j, l))
		return refusal(err), err
	}, r.sleep, func(why chassis.Refusal, err error) {
		e := j.ev
		e.Kind, e.Reason, e.Err, e.BrokerErr, e.Refused = EventDeadLetterFailed, v.Reason, v.Cause, err, why != chassis.Unreached
		r.observe(r.hctx, e)
	}, attrs, slog.String("settlement", r.gaveUpSettlement()), slog.String("dead_letter_queue", r.dlq))
	switch {
	case err == nil:
		o.Logger().LogAttrs(r.hctx, slog.LevelWarn, "idemsqs: poison dead-lettered", append(attrs, slog.String("dead_letter_queue", r.dlq))...)
		r.c.tries.Forget(j.id)
		r.delete(j, EventDeadLettered)
	case gaveUp:
		j.ev.BrokerErr = err
		r.c.tries.Forget(j.id)
		if r.redriven {
			r.changeVisibility(j, 0, EventDiscarded)
		} else {
			r.delete(j, EventDiscarded)
		}
	default:
		r.changeVisibility(j, 0, EventDelayed) // the consumer stops: the message comes back
	}
}

// gaveUpSettlement says, in the log of a dead letter given up on, what
// becomes of the message.
func (r *runner) gaveUpSettlement() string {
	if r.redriven {
		return "left to the queue's redrive policy: visible again"
	}
	return "deleted: the queue has no redrive policy"
}

// letter returns the dead letter of j, fit to SQS's limits: the whole to
// the dead-letter queue's MaximumMessageSize, at most ten attributes.
func (r *runner) letter(j *job, v chassis.Verdict) *chassis.Letter {
	m := j.m
	names := make([]string, 0, len(m.MessageAttributes))
	for name := range m.MessageAttributes {
		names = append(names, name)
	}
	slices.Sort(names)
	hs := make([]chassis.Header, 0, len(names))
	for _, name := range names {
		// The letter's value stands for the attribute's size alone (its
		// data type with it): the letter takes the typed value from m.
		value, _ := attrText(m, name)
		hs = append(hs, chassis.Header{Name: name, Value: []byte(value + aws.ToString(m.MessageAttributes[name].DataType))})
	}
	l := chassis.NewLetter(nil, body(m), hs, v, j.claim.Op.Key, j.keyErr == nil && j.claim.Op.Key != "",
		chassis.Header{Name: HeaderQueue, Value: []byte(r.c.queue)},
		chassis.Header{Name: HeaderMessageID, Value: []byte(j.ev.MessageID)})
	l.Fit(r.dlqMax)
	fitCount(l, maxAttributes)
	return l
}

// fitCount leaves out the original attributes of l, the longest first,
// until l has at most n, and adds their names to the list of the headers
// left out (consumer.HeaderCutHeaders).
func fitCount(l *chassis.Letter, n int) {
	cutAt := slices.IndexFunc(l.Added, func(h chassis.Header) bool { return h.Name == consumer.HeaderCutHeaders })
	if len(l.Headers)+len(l.Added) <= n {
		return
	}
	if cutAt < 0 {
		n-- // the list takes an attribute of its own
	}
	long := slices.Clone(l.Headers)
	slices.SortStableFunc(long, func(a, b chassis.Header) int { return cmp.Compare(len(b.Value), len(a.Value)) })
	var cut []string
	for _, h := range long {
		if len(l.Headers)+len(l.Added) <= n {
			break
		}
		l.Headers = slices.DeleteFunc(l.Headers, func(x chassis.Header) bool { return x.Name == h.Name })
		cut = append(cut, h.Name)
	}
	list := strings.Join(cut, ",")
	if cutAt >= 0 {
		list = string(l.Added[cutAt].Value) + "," + list
		l.Added = slices.Delete(l.Added, cutAt, cutAt+1)
	}
	if len(list) > consumer.MaxHeaderValue {
		list = list[:strings.LastIndexByte(list[:consumer.MaxHeaderValue], ',')]
	}
	l.Added = append(l.Added, chassis.Header{Name: consumer.HeaderCutHeaders, Value: []byte(list)})
}

// letterInput returns the SendMessage of the dead letter l of j: the
// attributes l kept with their typed values from j, l's own attributes
// and body.
func (r *runner) letterInput(j *job, l *chassis.Letter) *sqs.SendMessageInput {
	attrs := make(map[string]types.MessageAttributeValue, len(l.Headers)+len(l.Added))
	for _, h := range l.Headers {
		attrs[h.Name] = j.m.MessageAttributes[h.Name]
	}
	for _, h := range l.Added {
		attrs[h.Name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(string(h.Value))}
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(r.dlq), MessageBody: aws.String(cmp.Or(string(l.Body), BodyLeftOut)),
		MessageAttributes: attrs}
	if r.dlqFIFO {
		in.MessageGroupId = aws.String(cmp.Or(sysAttr(j.m, types.MessageSystemAttributeNameMessageGroupId), DeadLetterGroup))
		// The original's id: a letter sent again after an answer that was
		// lost, or for the same message received again, is one letter.
		in.MessageDeduplicationId = aws.String(j.ev.MessageID)
	}
	return in
}
