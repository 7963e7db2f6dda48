package sqspub

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/idemgo/idem/internal/sqsattr"
	"github.com/idemgo/idem/outbox"
)

// KeyAttribute is the message attribute that carries the message's ID:
// the idempotency key idemsqs reads by default.
const KeyAttribute = "idempotency-key"

// EncodingAttribute marks a message whose body is not the payload as it
// is: "base64" (the body is the payload in standard base64; a payload
// that is not text SQS takes), or "empty" (the payload is empty, and the
// body, which SQS requires, is "-").
const EncodingAttribute = "idem-payload-encoding"

// Limits SQS sets on a message and a SendMessageBatch call.
const (
	maxEntries    = 10      // entries of a batch call
	maxAttributes = 10      // message attributes of a message
	maxBatchBytes = 1 << 20 // a batch call's messages together, and one message
)

// API is the part of *sqs.Client the Publisher calls.
type API interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

var _ API = (*sqs.Client)(nil)

// Publisher publishes outbox messages to SQS queues. It is safe for
// concurrent use; create it with [New].
type Publisher struct {
	api API
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a Publisher through api (an *sqs.Client).
func New(api API) (*Publisher, error) {
	if api == nil {
		return nil, errors.New("sqspub: New: the SQS client is nil")
	}
	return &Publisher{api: api}, nil
}

// ErrNotSQS is wrapped by the permanent error of a message SQS could
// never take as it is: more than 10 attributes, an attribute name or
// value SQS refuses, a Destination that is no queue URL.
var ErrNotSQS = errors.New("sqspub: the message cannot be an SQS message")

// Publish sends msgs to their queues and returns once SQS answered each;
// see outbox.Publisher. A key's messages go in successive rounds
// ([outbox.PublishInRounds]), each round in SendMessageBatch calls of up
// to 10 messages and 1 MiB, so no message of a key reaches SQS ahead of
// one that failed. Each message has its own outcome, from its entry of
// the batch's answer:
//
//   - accepted: nil;
//   - refused for itself (a body or attributes SQS refuses, too large, a
//     FIFO id it refuses): an [outbox.PermanentError], which the relay does
//     not retry; so too a message that cannot be an SQS message at all
//     ([ErrNotSQS]: over 1 MiB with its attributes, more than 10
//     attributes, an attribute SQS refuses), which is not sent;
//   - failed on SQS's side (an entry without SenderFault), throttled, a
//     5xx, no answer: an [outbox.UnavailableError], which counts no
//     attempt; the rest of the round fails so too;
//   - a call SQS refused as a whole (a queue that does not exist, access
//     denied): that error, an attempt counted, until the relay's
//     MaxAttempts.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return outbox.PublishInRounds(ctx, msgs, p.round)
}

// round sends one round, queue by queue, in batch calls.
func (p *Publisher) round(ctx context.Context, round []outbox.Message) []error {
	errs := make([]error, len(round))
	entries := make([]*types.SendMessageBatchRequestEntry, len(round))
	sizes := make([]int, len(round))
	for i, m := range round {
		entries[i], sizes[i], errs[i] = entry(m)
	}
	sent := make([]bool, len(round))
	for i := range round {
		if errs[i] != nil || sent[i] {
			continue
		}
		// The batch: this message and the next of the same queue, up to
		// the limits.
		queue := round[i].Destination
		var at []int
		bytes := 0
		for k := i; k < len(round) && len(at) < maxEntries; k++ {
			if sent[k] || errs[k] != nil || round[k].Destination != queue {
				continue
			}
			if len(at) > 0 && bytes+sizes[k] > maxBatchBytes {
				continue
			}
			at = append(at, k)
			bytes += sizes[k]
			sent[k] = true
		}
		if p.send(ctx, queue, at, entries, errs) {
			// SQS unavailable: the rest of the round would fail so too.
			for k := range round {
				if !sent[k] && errs[k] == nil {
					errs[k], sent[k] = outbox.Unavailable(fmt.Errorf("sqspub: not sent: %w", unwrapped(errs[at[0]]))), true
				}
			}
			break
		}
	}
	return errs
}

func unwrapped(err error) error {
	if u, ok := errors.AsType[*outbox.UnavailableError](err); ok {
		return u.Err
	}
	return err
}

// send sends the entries at of one queue in one call and sets their
// errors; it reports whether SQS was unavailable.
func (p *Publisher) send(ctx context.Context, queue string, at []int, entries []*types.SendMessageBatchRequestEntry, errs []error) (unavailable bool) {
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: make([]types.SendMessageBatchRequestEntry, len(at))}
	for n, k := range at {
		in.Entries[n] = *entries[k]
		in.Entries[n].Id = aws.String(strconv.Itoa(n))
	}
	out, err := p.api.SendMessageBatch(ctx, in)
	if err != nil {
		err = fmt.Errorf("sqspub: SendMessageBatch to %s: %w", queue, err)
		switch {
		case ctx.Err() != nil:
		case tooLarge(err) && len(at) == 1:
			err = outbox.Permanent(err)
		case refused(err):
		default:
			err, unavailable = outbox.Unavailable(err), true
		}
		for _, k := range at {
			errs[k] = err
		}
		return unavailable
	}
	answered := make([]bool, len(at))
	for _, ok := range out.Successful {
		if n, err := strconv.Atoi(aws.ToString(ok.Id)); err == nil && n >= 0 && n < len(at) {
			answered[n] = true
		}
	}
	for _, f := range out.Failed {
		n, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || n < 0 || n >= len(at) {
			continue
		}
		answered[n] = true
		e := fmt.Errorf("sqspub: SQS refused the message to %s: %s: %s", queue, aws.ToString(f.Code), aws.ToString(f.Message))
		if f.SenderFault {
			errs[at[n]] = outbox.Permanent(e)
		} else {
			errs[at[n]] = outbox.Unavailable(e)
		}
	}
	for n, k := range at {
		if !answered[n] {
			errs[k] = outbox.Unavailable(fmt.Errorf("sqspub: SendMessageBatch to %s did not answer for the message", queue))
		}
	}
	return false
}

// entry returns the SendMessageBatch entry of m and its size as SQS counts
// it, or the permanent error of a message SQS could never take.
func entry(m outbox.Message) (*types.SendMessageBatchRequestEntry, int, error) {
	if !strings.HasPrefix(m.Destination, "https://") && !strings.HasPrefix(m.Destination, "http://") {
		return nil, 0, outbox.Permanent(fmt.Errorf("%w: the destination %q is not a queue URL", ErrNotSQS, m.Destination))
	}
	attrs := make(map[string]types.MessageAttributeValue, len(m.Headers)+2)
	size := 0
	add := func(name, value string) {
		attrs[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(value)}
		size += len(name) + len("String") + len(value)
	}
	for name, v := range m.Headers {
		if !sqsattr.ValidName(name) {
			return nil, 0, outbox.Permanent(fmt.Errorf("%w: the header name %q is not an SQS message attribute name", ErrNotSQS, name))
		}
		if v == "" || !sqsattr.Text(v) {
			return nil, 0, outbox.Permanent(fmt.Errorf("%w: the header %s is empty or holds characters SQS refuses", ErrNotSQS, name))
		}
		add(name, v)
	}
	add(KeyAttribute, m.ID)
	body := string(m.Payload)
	switch {
	case len(m.Payload) == 0:
		body = "-"
		add(EncodingAttribute, "empty")
	case !sqsattr.Text(body):
		body = base64.StdEncoding.EncodeToString(m.Payload)
		add(EncodingAttribute, "base64")
	}
	if len(attrs) > maxAttributes {
		return nil, 0, outbox.Permanent(fmt.Errorf("%w: %d message attributes (its headers, %s and perhaps %s); SQS takes %d",
			ErrNotSQS, len(attrs), KeyAttribute, EncodingAttribute, maxAttributes))
	}
	if size += len(body); size > maxBatchBytes {
		return nil, 0, outbox.Permanent(fmt.Errorf("%w: %d bytes with its attributes (a payload that is not text goes in base64), "+
			"larger than SQS's largest message, %d", ErrNotSQS, size, maxBatchBytes))
	}
	e := &types.SendMessageBatchRequestEntry{MessageBody: aws.String(body), MessageAttributes: attrs}
	if strings.HasSuffix(m.Destination, ".fifo") {
		e.MessageDeduplicationId = aws.String(fifoID(m.ID))
		e.MessageGroupId = aws.String(fifoID(cmpOr(m.Key, m.ID)))
	}
	return e, size, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// fifoID returns s as a FIFO queue's MessageGroupId or
// MessageDeduplicationId: s itself when SQS takes it (1 to 128 characters
// of ASCII letters, digits and punctuation), else the hex of its SHA-256,
// the same for the same s.
func fifoID(s string) string {
	ok := len(s) >= 1 && len(s) <= 128
	for i := 0; ok && i < len(s); i++ {
		ok = s[i] > ' ' && s[i] < 0x7f
	}
	if ok {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// refused reports whether SQS answered a call no (a 4xx other than
// throttling): the call would fail again as it is.
func refused(err error) bool {
	if apiErr, ok := errors.AsType[smithy.APIError](err); ok {
		switch strings.TrimPrefix(apiErr.ErrorCode(), "AWS.SimpleQueueService.") {
		case "ThrottlingException", "RequestThrottled", "KmsThrottled":
			return false
		}
	}
	if status, ok := errors.AsType[interface {
		error
		HTTPStatusCode() int
	}](err); ok {
		s := status.HTTPStatusCode()
		return s >= 400 && s < 500 && s != 429 && s != 408
	}
	return false
}

// tooLarge reports whether SQS refused a call for the size of its
// messages.
func tooLarge(err error) bool {
	apiErr, ok := errors.AsType[smithy.APIError](err)
	if !ok {
		return false
	}
	// The JSON protocol's codes carry a prefix (AWS.SimpleQueueService.).
	code := apiErr.ErrorCode()
	return strings.HasSuffix(code, "BatchRequestTooLong") || strings.HasSuffix(code, "RequestEntityTooLarge") ||
		(strings.HasSuffix(code, "InvalidParameterValue") && strings.Contains(apiErr.ErrorMessage(), "shorter than"))
}

// Payload returns the payload of a message the Publisher sent: its body,
// decoded as its EncodingAttribute says.
func Payload(m types.Message) ([]byte, error) {
	body := aws.ToString(m.Body)
	enc := m.MessageAttributes[EncodingAttribute]
	switch aws.ToString(enc.StringValue) {
	case "":
		return []byte(body), nil
	case "empty":
		return []byte{}, nil
	case "base64":
		return base64.StdEncoding.DecodeString(body)
	default:
		return nil, fmt.Errorf("sqspub: Payload: unknown %s %q", EncodingAttribute, aws.ToString(enc.StringValue))
	}
}
