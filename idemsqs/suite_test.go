package idemsqs_test

import (
	"context"
	"encoding/base64"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem/consumer/consumertest"
	"github.com/idemgo/idem/idemsqs"
	"github.com/idemgo/idem/internal/testenv"
)

// The behaviour suite every idem consumer passes, on the SQS-compatible
// server of IDEM_SQS_URL.
func TestConsumerSuite(t *testing.T) { consumertest.Run(t, sqsBroker{}) }

// suiteVisibility is the visibility timeout of the suite's queues: short,
// so that the consumer's renewals of it are exercised by every case.
const suiteVisibility = "2"

// maxMessage is the largest message SQS takes (and moto, counting the
// body alone): 1 MiB.
const maxMessage = 1 << 20

// sqsBroker is consumertest's harness: a queue per case and a dead-letter
// queue of the case's own, a consumer whose client goes through a proxy
// that Cut drops, one handler at a time.
//
// SQS bodies are text (the SDK sends them as JSON strings) and the
// suite's are bytes, so the harness sends every body in base64 and the
// handler and DeadLetters see it decoded. A key that SQS would not take
// as a String attribute (a NUL byte) goes as a Binary one.
type sqsBroker struct{}

// MaxBody is the largest body whose base64 is a message SQS takes and
// whose dead letter, its attributes added, still fits whole: what the
// consumer leaves out of a letter is measured on the SQS body, the base64,
// not on the suite's bytes. A letter at SQS's own limit, its body left
// out, is TestDeadLetterAtLimit's.
func (sqsBroker) MaxBody() int { return (maxMessage - 8<<10) / 4 * 3 }

// MaxHeader is what an attribute's value may hold beside a small body.
func (sqsBroker) MaxHeader() int { return maxMessage - 64<<10 }

// Ordered is false: a message made visible again lets the others of a
// standard queue pass.
func (sqsBroker) Ordered() bool { return false }

func (b sqsBroker) New(t *testing.T, cfg consumertest.Config) error {
	c := client(t)
	q := newQueue(t, c, map[string]string{"VisibilityTimeout": suiteVisibility})
	_, err := b.consumer(c, q, newQueue(t, c, nil), cfg, nil)
	return err
}

func (b sqsBroker) Start(t *testing.T, cfg consumertest.Config) consumertest.Consumer {
	c := client(t)
	q := newQueue(t, c, map[string]string{"VisibilityTimeout": suiteVisibility})
	u, err := url.Parse(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.StartProxy(t, u.Host)
	// The consumer's own client, through the proxy: its receives,
	// deletes, visibility changes and dead letters.
	pc := newClient(t, "http://"+p.Addr())
	r := &harnessRun{c: c, queue: q, p: p}
	switch cfg.Poison {
	case consumertest.PoisonDeadLetter:
		r.dead = newQueue(t, c, nil)
		r.dlq = r.dead
	case consumertest.PoisonRefused:
		// A queue that exists when Run starts (which checks it), and that
		// DropDeadLetter deletes: every letter is then refused.
		r.dlq = newQueue(t, c, nil)
	case consumertest.PoisonMissing:
		// The URL of a queue of the server that was never created.
		r.dlq = strings.TrimSuffix(q, "/"+q[strings.LastIndex(q, "/")+1:]) + "/idemtest-missing-" + q[strings.LastIndex(q, "/")+1:]
	}
	started := make(chan struct{})
	var once sync.Once
	cons, err := b.consumer(pc, q, r.dlq, cfg, func(_ context.Context, e idemsqs.Event) {
		if e.Kind == idemsqs.EventStarted {
			once.Do(func() { close(started) })
		}
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.run = consumertest.Go(cons.Run)
	t.Cleanup(func() { r.Stop(t) })
	if cfg.Poison == consumertest.PoisonMissing {
		return r // Run returns at start: the suite reads its error
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the consumer did not start")
	}
	return r
}

// consumer returns the consumer of the queue q that cfg describes, its
// dead letters to dlq.
func (sqsBroker) consumer(c *sqs.Client, q, dlq string, cfg consumertest.Config, observe func(context.Context, idemsqs.Event)) (*idemsqs.Consumer, error) {
	opts := []idemsqs.Option{
		idemsqs.WithConcurrency(1),
		idemsqs.WithWaitTime(time.Second),
		idemsqs.WithRetryBackoff(cfg.RetryFirst, cfg.RetryLongest),
		idemsqs.WithBusyDelay(cfg.BusyDelay),
		idemsqs.WithDrainTimeout(cfg.DrainTimeout),
		// The suite's payload is the body it published, not its base64.
		idemsqs.WithFingerprint(func(m types.Message) []byte { return decode(m.Body) }),
	}
	opts = append(opts, idemsqs.WithObserver(func(ctx context.Context, e idemsqs.Event) {
		if observe != nil {
			observe(ctx, e)
		}
		if cfg.Observer != nil {
			cfg.Observer(e.Activity())
		}
		if cfg.UserFunc != nil {
			cfg.UserFunc("observer", consumertest.Received{})
		}
	}))
	switch cfg.Scope {
	case consumertest.ScopeShared:
		opts = append(opts, idemsqs.WithSharedScope())
	case consumertest.ScopeHeader:
		opts = append(opts, idemsqs.WithScope(func(m types.Message) string {
			userFunc(cfg, "scope", m)
			return text(m.MessageAttributes["tenant"])
		}))
	}
	if cfg.UserFunc != nil {
		opts = append(opts,
			idemsqs.WithKeyFunc(func(m types.Message) (string, error) {
				userFunc(cfg, "key", m)
				if _, ok := m.MessageAttributes["idempotency-key"]; !ok {
					return "", nil
				}
				return received(m).Key, nil
			}),
			idemsqs.WithFingerprint(func(m types.Message) []byte {
				userFunc(cfg, "fingerprint", m)
				return decode(m.Body)
			}))
	}
	switch cfg.Poison {
	case consumertest.PoisonDeadLetter, consumertest.PoisonRefused, consumertest.PoisonMissing:
		opts = append(opts, idemsqs.WithDeadLetter(dlq))
	case consumertest.PoisonDiscard:
		opts = append(opts, idemsqs.WithDiscardPoison())
	}
	if cfg.MaxAttempts != 0 {
		opts = append(opts, idemsqs.WithMaxAttempts(cfg.MaxAttempts))
	}
	if cfg.UnkeyedUnguarded {
		opts = append(opts, idemsqs.WithUnkeyedUnguarded())
	}
	h := func(ctx context.Context, m types.Message) error { return cfg.Handler(ctx, received(m)) }
	return idemsqs.New(cfg.Guard, c, q, h, opts...)
}

// received is m as the suite's handler gets it.
func received(m types.Message) consumertest.Received {
	return consumertest.Received{Key: text(m.MessageAttributes["idempotency-key"]), Body: decode(m.Body), Headers: texts(m.MessageAttributes)}
}

// userFunc calls cfg's UserFunc, if any, as the function fn of m.
func userFunc(cfg consumertest.Config, fn string, m types.Message) {
	if cfg.UserFunc != nil {
		cfg.UserFunc(fn, received(m))
	}
}

// text returns an attribute's value as text.
func text(v types.MessageAttributeValue) string {
	if v.StringValue != nil {
		return *v.StringValue
	}
	return string(v.BinaryValue)
}

func texts(attrs map[string]types.MessageAttributeValue) map[string]string {
	out := make(map[string]string, len(attrs))
	for k, v := range attrs {
		out[k] = text(v)
	}
	return out
}

// decode returns the bytes of a base64 body; a dead letter's body left out
// is none.
func decode(body *string) []byte {
	s := aws.ToString(body)
	if s == idemsqs.BodyLeftOut {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return []byte("undecodable: " + s)
	}
	return b
}

// harnessRun is a consumer of the harness, running.
type harnessRun struct {
	c     *sqs.Client // the harness's own client, not cut
	queue string
	dead  string // "" unless PoisonDeadLetter
	dlq   string // the consumer's dead-letter queue, "" without one
	p     *testenv.Proxy
	run   *consumertest.Running

	mu      sync.Mutex
	letters []consumertest.DeadLetter
}

func (r *harnessRun) Publish(t *testing.T, m consumertest.Message) {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(r.queue), MessageBody: aws.String(base64.StdEncoding.EncodeToString(m.Body)),
		MessageAttributes: map[string]types.MessageAttributeValue{}}
	if !m.NoKey {
		in.MessageAttributes["idempotency-key"] = keyAttr(m.Key)
	}
	for k, v := range m.Headers {
		in.MessageAttributes[k] = attr(v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.c.SendMessage(ctx, in); err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
}

// keyAttr returns the key attribute of key: a String, or a Binary one for
// a key SQS does not take as text (characters outside XML's).
func keyAttr(key string) types.MessageAttributeValue {
	if utf8.ValidString(key) && !strings.ContainsFunc(key, func(r rune) bool { return r < ' ' && r != '\t' && r != '\n' && r != '\r' }) {
		return attr(key)
	}
	return types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte(key)}
}

// DeadLetters receives what arrived at the dead-letter queue since the last
// call, deletes it, and returns every letter so far.
func (r *harnessRun) DeadLetters(t *testing.T) []consumertest.DeadLetter {
	t.Helper()
	if r.dead == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		msgs := receive(t, r.c, r.dead, 10, 0, 30)
		if len(msgs) == 0 {
			break
		}
		entries := make([]types.DeleteMessageBatchRequestEntry, len(msgs))
		for i, m := range msgs {
			r.letters = append(r.letters, consumertest.DeadLetter{Body: decode(m.Body), Headers: texts(m.MessageAttributes)})
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: m.MessageId, ReceiptHandle: m.ReceiptHandle}
		}
		if _, err := r.c.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(r.dead), Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}
	return append([]consumertest.DeadLetter(nil), r.letters...)
}

func (r *harnessRun) Stop(t *testing.T) error { return r.run.Stop(t) }

func (r *harnessRun) Cut(t *testing.T) { r.p.Drop() }

func (r *harnessRun) Returned(t *testing.T, d time.Duration) (bool, error) {
	return r.run.Returned(t, d)
}

// DropDeadLetter deletes the dead-letter queue, and returns once SQS says
// it does not exist.
func (r *harnessRun) DropDeadLetter(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := r.c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(r.dlq)}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the dead-letter queue deleted", func() bool {
		_, err := r.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(r.dlq)})
		return err != nil
	})
}

// Steered returns nothing: SQS routes, delays or expires a message by
// nothing it carries (DelaySeconds, a FIFO group and deduplication id are
// parameters of the send, which the consumer sets itself on a dead
// letter), and a message attribute is data only.
func (r *harnessRun) Steered(*testing.T) []string { return nil }

// Settled reports whether the queue holds no message, visible or not.
func (r *harnessRun) Settled(t *testing.T) bool {
	v, inv, d := counts(t, r.c, r.queue)
	return v == "0" && inv == "0" && d == "0"
}
