package outboxsqs_test

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/goleak"

	"github.com/idemgo/idem/idemsqs/idemsqstest"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/outbox/sqspub"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client returns a client of the tests' SQS server; it skips or fails t
// when the server cannot be reached.
func client(t testing.TB) *sqs.Client { return idemsqstest.Client(t) }

// newQueue creates a FIFO queue of t's own (the suite checks each key's
// order, which a standard queue does not keep), deleted when t ends.
func newQueue(t testing.TB, c *sqs.Client) string {
	return idemsqstest.Queue(t, c, map[string]string{"FifoQueue": "true"})
}

// subscribe receives the queue's messages, deleting them, onto the
// channel returned, until t ends.
func subscribe(t testing.TB, c *sqs.Client, url string) <-chan outboxtest.Received {
	got := make(chan outboxtest.Received, 10000)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		for ctx.Err() == nil {
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
				WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
			if err != nil {
				continue
			}
			var entries []types.DeleteMessageBatchRequestEntry
			for i, m := range out.Messages {
				payload, err := sqspub.Payload(m)
				if err != nil {
					t.Errorf("message %s: %v", aws.ToString(m.MessageId), err)
				}
				h := map[string]string{}
				for name, v := range m.MessageAttributes {
					h[name] = aws.ToString(v.StringValue)
				}
				got <- outboxtest.Received{ID: h[sqspub.KeyAttribute], Headers: h, Payload: payload}
				entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
			if len(entries) > 0 {
				c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
			}
		}
	})
	return got
}

func TestPublisher(t *testing.T) {
	outboxtest.TestPublisher(t, func(t *testing.T) outboxtest.Broker {
		c := client(t)
		pub, err := sqspub.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return outboxtest.Broker{
			Publisher: pub,
			Destination: func(t *testing.T) (string, <-chan outboxtest.Received) {
				q := newQueue(t, c)
				return q, subscribe(t, c, q)
			},
			Poisons: []outboxtest.Poison{
				{Name: "ElevenAttributes", Message: func(dest string) outbox.Message {
					h := map[string]string{}
					for i := range 10 {
						h["h"+strconv.Itoa(i)] = "v"
					}
					return outbox.Message{Destination: dest, Headers: h, Payload: []byte("poison")}
				}, Err: "SQS takes 10"},
				{Name: "AttributeName", Message: func(dest string) outbox.Message {
					return outbox.Message{Destination: dest, Headers: map[string]string{"AWS.reserved": "v"}, Payload: []byte("poison")}
				}, Err: "not an SQS message attribute name"},
				// Under the outbox's cap, but not text: its base64 is over
				// SQS's 1 MiB.
				{Name: "OverOneMiBInBase64", Message: func(dest string) outbox.Message {
					return outbox.Message{Destination: dest, Payload: bytes.Repeat([]byte{0xff}, 800<<10)}
				}, Err: "larger than SQS's largest message"},
			},
		}
	})
}

// TestSQSDropsARepublishedMessage: a message published again (as a relay
// does after a crash) carries the same MessageDeduplicationId, and the
// FIFO queue keeps one copy.
func TestSQSDropsARepublishedMessage(t *testing.T) {
	c := client(t)
	q := newQueue(t, c)
	pub, err := sqspub.New(c)
	if err != nil {
		t.Fatal(err)
	}
	msg := outbox.Message{ID: "charge-" + outboxtest.NewRunID(), Destination: q, Key: "order-1", Payload: []byte("42")}
	for range 2 {
		if err := pub.Publish(context.Background(), []outbox.Message{msg}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		t.Fatal(err)
	}
	if n := out.Attributes["ApproximateNumberOfMessages"]; n != "1" {
		t.Errorf("the queue holds %s messages after the same one was published twice, want 1", n)
	}
}

// TestAMissingQueueIsARefusal: a queue that does not exist fails the
// message as a refusal (an attempt counted), neither unavailable nor
// permanent, and fails it alone.
func TestAMissingQueueIsARefusal(t *testing.T) {
	c := client(t)
	q := newQueue(t, c)
	pub, err := sqspub.New(c)
	if err != nil {
		t.Fatal(err)
	}
	err = pub.Publish(context.Background(), []outbox.Message{{ID: "x", Destination: q + "-missing.fifo", Key: "a"},
		{ID: "y", Destination: q, Key: "b", Payload: []byte("y")}})
	pe, ok := err.(*outbox.PublishError)
	if !ok || pe.Errs[0] == nil || pe.Errs[1] != nil {
		t.Fatalf("Publish = %v, want the message to the missing queue failed alone", err)
	}
	if outbox.IsUnavailable(pe.Errs[0]) || outbox.IsPermanent(pe.Errs[0]) {
		t.Errorf("a missing queue = %v, want a refusal, neither unavailable nor permanent", pe.Errs[0])
	}
}
