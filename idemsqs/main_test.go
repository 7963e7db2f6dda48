package idemsqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemsqs/idemsqstest"
	"github.com/idemgo/idem/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The shared helpers, under the names the tests use.
var (
	server    = idemsqstest.Server
	newClient = idemsqstest.NewClient
	client    = idemsqstest.Client
	newQueue  = idemsqstest.Queue
)

// queueArn returns the ARN of the queue at url.
func queueArn(tb testing.TB, c *sqs.Client, url string) string {
	tb.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		tb.Fatal(err)
	}
	return out.Attributes[string(types.QueueAttributeNameQueueArn)]
}

// send sends body to the queue at url with the key attribute (none when
// key is "") and the attributes of extra, and returns its message id.
func send(tb testing.TB, c *sqs.Client, url, key, body string, extra ...func(*sqs.SendMessageInput)) string {
	tb.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body),
		MessageAttributes: map[string]types.MessageAttributeValue{}}
	if key != "" {
		in.MessageAttributes["idempotency-key"] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(key)}
	}
	for _, f := range extra {
		f(in)
	}
	out, err := c.SendMessage(context.Background(), in)
	if err != nil {
		tb.Fatalf("SendMessage: %v", err)
	}
	return aws.ToString(out.MessageId)
}

// inGroup sends a message to the FIFO group g, deduplicated by id.
func inGroup(g, id string) func(*sqs.SendMessageInput) {
	return func(in *sqs.SendMessageInput) {
		in.MessageGroupId, in.MessageDeduplicationId = aws.String(g), aws.String(id)
	}
}

// receive receives up to n messages of the queue at url, waiting up to
// wait, with all their attributes.
func receive(tb testing.TB, c *sqs.Client, url string, n int, wait time.Duration, vis int32) []types.Message {
	tb.Helper()
	out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
		MaxNumberOfMessages: int32(n), WaitTimeSeconds: int32(wait / time.Second), VisibilityTimeout: vis,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil {
		tb.Fatalf("ReceiveMessage: %v", err)
	}
	return out.Messages
}

// counts returns the queue's visible, invisible and delayed messages.
func counts(tb testing.TB, c *sqs.Client, url string) (visible, invisible, delayed string) {
	tb.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		tb.Fatalf("GetQueueAttributes: %v", err)
	}
	a := out.Attributes
	return a[string(types.QueueAttributeNameApproximateNumberOfMessages)],
		a[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)],
		a[string(types.QueueAttributeNameApproximateNumberOfMessagesDelayed)]
}

// guard returns a Guard over a fresh memstore with lease.
func guard(tb testing.TB, lease time.Duration) *idem.Guard {
	tb.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	g, err := idem.New(s, idem.Config{Lease: lease})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Close() })
	return g
}

// waitFor polls cond until it holds, failing tb after d.
func waitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func attr(s string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
}
