package idemsqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// The SQS behaviours the consumer relies on, each checked against the
// server of the tests, so that a server (or an SQS) that behaves otherwise
// fails here, by name, rather than in the consumer's tests.

// A message whose visibility timeout ends before it is deleted is
// delivered again, its ApproximateReceiveCount one more: the duplicates
// the consumer exists for, and the count WithRedrivePolicy's
// maxReceiveCount reads.
func TestSQSVisibilityTimeoutRedelivers(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := newQueue(t, c, nil)
	id := send(t, c, q, "k", "body")
	first := receive(t, c, q, 1, time.Second, 1)
	if len(first) != 1 || aws.ToString(first[0].MessageId) != id {
		t.Fatalf("first receive: %d messages, want the one sent", len(first))
	}
	if n := first[0].Attributes["ApproximateReceiveCount"]; n != "1" {
		t.Fatalf("first receive's ApproximateReceiveCount = %q, want 1", n)
	}
	if again := receive(t, c, q, 1, 0, 1); len(again) != 0 {
		t.Fatal("a message was delivered again within its visibility timeout")
	}
	time.Sleep(1200 * time.Millisecond)
	second := receive(t, c, q, 1, 2*time.Second, 30)
	if len(second) != 1 || aws.ToString(second[0].MessageId) != id {
		t.Fatalf("after its visibility timeout: %d messages, want the one sent again", len(second))
	}
	if n := second[0].Attributes["ApproximateReceiveCount"]; n != "2" {
		t.Fatalf("second receive's ApproximateReceiveCount = %q, want 2", n)
	}
	if second[0].MessageAttributes["idempotency-key"].StringValue == nil {
		t.Fatal("the message delivered again lost its attributes")
	}
}

// ChangeMessageVisibility(Batch) extends a message's visibility from the
// time of the call: the consumer's keeper, which renews it while the
// handler runs. A visibility set to 0 makes it visible at once: a busy
// key or a retry coming back.
func TestSQSChangeMessageVisibilityExtends(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := newQueue(t, c, nil)
	send(t, c, q, "k", "body")
	m := receive(t, c, q, 1, time.Second, 1)
	if len(m) != 1 {
		t.Fatal("no message")
	}
	out, err := c.ChangeMessageVisibilityBatch(context.Background(), &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q),
		Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: m[0].ReceiptHandle, VisibilityTimeout: 3}}})
	if err != nil || len(out.Failed) != 0 {
		t.Fatalf("ChangeMessageVisibilityBatch: %v, %+v", err, out)
	}
	time.Sleep(1500 * time.Millisecond) // past the receive's timeout of 1s
	if again := receive(t, c, q, 1, 0, 1); len(again) != 0 {
		t.Fatal("a message whose visibility was extended to 3s came back after 1.5s")
	}
	if _, err := c.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q),
		ReceiptHandle: m[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	if back := receive(t, c, q, 1, time.Second, 30); len(back) != 1 {
		t.Fatal("a message made visible (0) did not come back at once")
	}
}

// A FIFO queue delivers a message group in order, and none of a group
// while one of it is in flight: the consumer runs a group's messages in
// order and relies on SQS to hold the rest of a group back while one is
// invisible to be retried.
func TestSQSFIFOOrder(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := newQueue(t, c, map[string]string{"FifoQueue": "true"})
	for _, b := range []string{"m0", "m1", "m2"} {
		send(t, c, q, b, b, inGroup("g", b))
	}
	first := receive(t, c, q, 1, time.Second, 30)
	if len(first) != 1 || aws.ToString(first[0].Body) != "m0" {
		t.Fatalf("first receive: %v, want m0", bodies(first))
	}
	if held := receive(t, c, q, 10, 0, 30); len(held) != 0 {
		t.Fatalf("while m0 is in flight its group gave %v, want none", bodies(held))
	}
	if _, err := c.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q),
		ReceiptHandle: first[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	all := receive(t, c, q, 10, time.Second, 30)
	if got := bodies(all); len(got) != 3 || got[0] != "m0" || got[1] != "m1" || got[2] != "m2" {
		t.Fatalf("after m0 came back: %v, want m0 m1 m2", got)
	}
	if all[0].Attributes["MessageGroupId"] != "g" || all[0].Attributes["MessageDeduplicationId"] != "m0" {
		t.Fatalf("system attributes %v: want MessageGroupId and MessageDeduplicationId", all[0].Attributes)
	}
}

// A batch call answers each entry on its own: the others succeed beside
// one refused (a receipt handle no longer valid), and the refused one says
// it was the sender's fault. The consumer settles each message by its own
// entry.
func TestSQSBatchPartialFailure(t *testing.T) {
	t.Parallel()
	c := client(t)
	q := newQueue(t, c, nil)
	send(t, c, q, "k", "body")
	m := receive(t, c, q, 1, time.Second, 30)
	if len(m) != 1 {
		t.Fatal("no message")
	}
	del, err := c.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q),
		Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: aws.String("not-a-receipt-handle")},
			{Id: aws.String("1"), ReceiptHandle: m[0].ReceiptHandle}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(del.Successful) != 1 || aws.ToString(del.Successful[0].Id) != "1" {
		t.Fatalf("DeleteMessageBatch succeeded for %+v, want entry 1", del.Successful)
	}
	if len(del.Failed) != 1 || aws.ToString(del.Failed[0].Id) != "0" || !del.Failed[0].SenderFault ||
		aws.ToString(del.Failed[0].Code) != "ReceiptHandleIsInvalid" {
		t.Fatalf("DeleteMessageBatch failed %+v, want entry 0, the sender's fault, ReceiptHandleIsInvalid", del.Failed)
	}
	vis, err := c.ChangeMessageVisibilityBatch(context.Background(), &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q),
		Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: aws.String("not-a-receipt-handle")}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(vis.Failed) != 1 || !vis.Failed[0].SenderFault {
		t.Fatalf("ChangeMessageVisibilityBatch failed %+v, want the entry, the sender's fault", vis.Failed)
	}
}

// A queue's redrive policy moves a message received maxReceiveCount times
// to its dead-letter queue, without its being deleted: WithRedrivePolicy.
func TestSQSRedrivePolicy(t *testing.T) {
	t.Parallel()
	c := client(t)
	dlq := newQueue(t, c, nil)
	q := newQueue(t, c, map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + queueArn(t, c, dlq) + `","maxReceiveCount":"2"}`})
	send(t, c, q, "k", "body")
	for i := range 2 {
		if m := receive(t, c, q, 1, 2*time.Second, 1); len(m) != 1 {
			t.Fatalf("receive %d: no message", i+1)
		}
		time.Sleep(1100 * time.Millisecond)
	}
	if m := receive(t, c, q, 1, time.Second, 1); len(m) != 0 {
		t.Fatal("a message received maxReceiveCount times was delivered a third time")
	}
	if m := receive(t, c, dlq, 1, 2*time.Second, 30); len(m) != 1 || aws.ToString(m[0].Body) != "body" {
		t.Fatal("the message is not in the redrive policy's dead-letter queue")
	}
}

func bodies(ms []types.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = aws.ToString(m.Body)
	}
	return out
}
