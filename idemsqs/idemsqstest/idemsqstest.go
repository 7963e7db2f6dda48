// Package idemsqstest gives tests SQS clients and queues on the
// SQS-compatible server of the test machine (moto, which
// scripts/services.sh starts), each queue of the test's own and deleted
// when the test ends, so that parallel tests and concurrent runs never see
// one another's messages.
//
// The server's endpoint comes from IDEM_SQS_URL (default
// http://127.0.0.1:4566). A server that cannot be reached skips the test,
// or fails it under IDEM_REQUIRE_SERVICES=1 (as make test sets it).
package idemsqstest

import (
	"context"
	"crypto/rand"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem/internal/testenv"
)

// Server is the SQS-compatible server of the tests.
var Server = testenv.Server{Name: "An SQS-compatible server", Env: "IDEM_SQS_URL", Default: "http://127.0.0.1:4566"}

// URL returns the server's endpoint: IDEM_SQS_URL, or
// http://127.0.0.1:4566.
func URL() string { return Server.Addr() }

// dummyCredentials sign the tests' requests: moto takes any.
var dummyCredentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "idemtest", SecretAccessKey: "idemtest", Source: "idemsqstest"}, nil
})

// NewClient returns a client of endpoint with dummy credentials, over a
// transport of its own whose idle connections are closed when tb ends. It
// does not check the server; [Client] does.
func NewClient(tb testing.TB, endpoint string) *sqs.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tb.Cleanup(tr.CloseIdleConnections)
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  dummyCredentials,
		HTTPClient:   &http.Client{Transport: tr},
	})
}

// Client returns a client of the server, or skips tb (fails it under
// IDEM_REQUIRE_SERVICES=1) when the server cannot be reached.
func Client(tb testing.TB) *sqs.Client {
	tb.Helper()
	if err := reachable(); err != nil {
		Server.Unreachable(tb, URL(), err)
	}
	return NewClient(tb, URL())
}

// reachable lists the server's queues once per test binary.
var reachable = sync.OnceValue(func() error {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	// The SDK's retries stay: moto closes its connections after each
	// answer, which now and then fails a read on one it reused.
	c := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(URL()), Credentials: dummyCredentials,
		HTTPClient: &http.Client{Transport: tr}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.ListQueues(ctx, &sqs.ListQueuesInput{MaxResults: aws.Int32(1)})
	return err
})

// Queue creates a queue of tb's own with attrs (a FIFO one when attrs
// says so), deleted when tb ends, and returns its URL.
func Queue(tb testing.TB, c *sqs.Client, attrs map[string]string) string {
	tb.Helper()
	name := "idemtest-" + strings.ToLower(rand.Text()[:12])
	if attrs[string(types.QueueAttributeNameFifoQueue)] == "true" {
		name += ".fifo"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		tb.Fatalf("CreateQueue(%s): %v", name, err)
	}
	url := aws.ToString(out.QueueUrl)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}) // some tests delete theirs first
	})
	return url
}
