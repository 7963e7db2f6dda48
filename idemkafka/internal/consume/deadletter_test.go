package consume_test

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/idemkafka/internal/consume"
)

// A produce's error is the broker's refusal only when Kafka says so: an
// error that is not retriable, or an unknown topic franz-go stopped
// waiting for. A connection that fails, a timeout or a retriable error is
// an outage, never counted toward giving the dead letter up.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want consume.Class
	}{
		{kerr.MessageTooLarge, consume.TooLarge},
		{fmt.Errorf("%w (uncompressed_bytes=1200000)", kerr.MessageTooLarge), consume.TooLarge}, // franz-go's own check
		{kerr.TopicAuthorizationFailed, consume.Refused},
		{kerr.InvalidTopicException, consume.Refused},
		{kerr.UnknownTopicOrPartition, consume.Refused}, // kgo.UnknownTopicRetries spent
		{kerr.PolicyViolation, consume.Refused},
		{kerr.NotLeaderForPartition, consume.Unreachable},
		{kerr.RequestTimedOut, consume.Unreachable},
		{fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.NotEnoughReplicas), consume.Unreachable},
		{context.DeadlineExceeded, consume.Unreachable},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, consume.Unreachable},
		{kgo.ErrClientClosed, consume.Unreachable},
	} {
		if got := consume.Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// The limit of a dead letter is its client's: ProducerBatchMaxBytes, per
// topic where the client says so, franz-go's default otherwise.
func TestBatchMaxBytes(t *testing.T) {
	for _, tc := range []struct {
		opts []kgo.Opt
		want int
	}{
		{nil, 1000012},
		{[]kgo.Opt{kgo.ProducerBatchMaxBytes(64 << 10)}, 64 << 10},
		{[]kgo.Opt{kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
			if topic == "dlq" {
				return 32 << 10
			}
			return 1 << 20
		})}, 32 << 10},
	} {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, tc.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if got := consume.BatchMaxBytes(cl, "dlq"); got != tc.want {
			t.Errorf("BatchMaxBytes = %d, want %d", got, tc.want)
		}
		cl.Close()
	}
}
