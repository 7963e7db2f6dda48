package idemkafka_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/internal/testenv"
)

// Records written by a producer that is not franz-go — kcat, on
// librdkafka, as a service in another language would write them — carry
// their idempotency key in a header the consumer reads: each order has one
// effect, its duplicates none.
func TestRecordsOfAnotherClient(t *testing.T) {
	t.Parallel()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		testenv.Unavailable(t, "kcat, a Kafka client on librdkafka, is not installed (apt-get install kcat): %v", err)
	}
	c := newCluster(t, map[string]int32{"orders": 1})
	topic, group := c.Name("orders"), c.Name("payments")
	const orders = 20
	var keys []string
	for i := range orders {
		key := fmt.Sprintf("order-%02d", i)
		keys = append(keys, key)
		copies := 1 + i%2 // every other order sent twice, as a retrying producer does
		for range copies {
			ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
			cmd := exec.CommandContext(ctx, kcat, "-P", "-b", strings.Join(c.ListenAddrs(), ","), "-t", topic, "-p", "0",
				"-H", idemkafka.DefaultKeyHeader+"="+key)
			cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"order":%d}`, i))
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("kcat -P: %v: %s", err, out)
			}
		}
	}
	l := newLedger()
	g := newGuard(t, newMem(t), idem.Config{})
	start(t, c, group, topic, g, func(ctx context.Context, r *kgo.Record) error {
		return l.handler(ctx, r)
	}, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison())
	wantCommitted(t, c, group, topic)
	l.wantOnce(t, keys)
	if n := c.EndOffsets(topic)[0]; n != orders*3/2 {
		t.Fatalf("%d records on the topic, want the %d kcat produced", n, orders*3/2)
	}
}
