package consume

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/internal/chassis"
)

// A produce's error is the broker's refusal only when Kafka says so: an
// error that is not retriable, or an unknown topic franz-go stopped
// waiting for. A connection that fails, a timeout or a retriable error is
// an outage, never counted toward giving the dead letter up.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want chassis.Refusal
	}{
		{kerr.MessageTooLarge, chassis.RefusedTooLarge},
		{fmt.Errorf("%w (uncompressed_bytes=1200000)", kerr.MessageTooLarge), chassis.RefusedTooLarge}, // franz-go's own check
		{kerr.TopicAuthorizationFailed, chassis.Refused},
		{kerr.InvalidTopicException, chassis.Refused},
		{kerr.UnknownTopicOrPartition, chassis.Refused}, // kgo.UnknownTopicRetries spent
		{kerr.PolicyViolation, chassis.Refused},
		{kerr.NotLeaderForPartition, chassis.Unreached},
		{kerr.RequestTimedOut, chassis.Unreached},
		{fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.NotEnoughReplicas), chassis.Unreached},
		{context.DeadlineExceeded, chassis.Unreached},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, chassis.Unreached},
		{kgo.ErrClientClosed, chassis.Unreached},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %d, want %d", tc.err, got, tc.want)
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
		if got := batchMaxBytes(cl, "dlq"); got != tc.want {
			t.Errorf("BatchMaxBytes = %d, want %d", got, tc.want)
		}
		cl.Close()
	}
}
