package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestUnavailable: the failures of brokers that cannot be reached or
// cannot take a partition's records now are unavailable; a broker's
// refusal of the records is not, even as the last error of a timeout.
func TestUnavailable(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "x"}}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connect: %w", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{kgo.ErrRecordTimeout, true},
		{kgo.ErrRecordRetries, true},
		{fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, refused), true},
		{fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.NotLeaderForPartition), true},
		{fmt.Errorf("%w, last err: %w", kgo.ErrRecordTimeout, kerr.UnknownTopicOrPartition), false},
		{kerr.LeaderNotAvailable, true},
		{kerr.NotEnoughReplicas, true},
		{kerr.RequestTimedOut, true},
		{dial, true},
		{refused, true},
		{kgo.ErrClientClosed, true},
		{fmt.Errorf("produce: no answer: %w", context.DeadlineExceeded), true},
		{kerr.UnknownTopicOrPartition, false},
		{kerr.CorruptMessage, false},
		{kerr.MessageTooLarge, false},
		{kerr.TopicAuthorizationFailed, false},
		{kerr.InvalidRecord, false},
		{errors.New("something else"), false},
	} {
		if got := unavailable(fmt.Errorf("kafkapub: produce to %q: %w", "t", tc.err)); got != tc.want {
			t.Errorf("unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
