package sqsstores_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemsqs"
	"github.com/idemgo/idem/idemsqs/idemsqstest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// benchConcurrency is the handlers at once on both sides: the bare loop's
// receivers take 10 messages each, as idemsqs's receives do.
const benchConcurrency = 16

// maxReceive is the most messages one ReceiveMessage returns.
const maxReceive = 10

// client returns a client of the tests' SQS server; it skips or fails t
// when the server cannot be reached.
func client(t testing.TB) *sqs.Client { return idemsqstest.Client(t) }

// BenchmarkConsume measures messages/s through a standard queue filled
// beforehand with b.N messages, each with its own key, with a handler
// that does nothing, one after the other in the same run:
//
//   - bare: receivers that long-poll ReceiveMessage for 10 messages, run
//     the handler of each on a goroutine of its own, and delete the 10 in
//     one DeleteMessageBatch: the least an SQS consumer does, with no
//     idempotency (benchConcurrency messages in flight);
//   - bare-redis: the same, with the handler between a SET NX PX of the
//     message's key and a SET PX of its outcome: a hand-rolled dedupe;
//   - redis: idemsqs over redisstore, WithConcurrency(benchConcurrency).
//
// scripts/bench-sqs.sh runs it and prints the ratios.
func BenchmarkConsume(b *testing.B) {
	b.Run("bare", func(b *testing.B) { benchBare(b, nil) })
	b.Run("bare-redis", func(b *testing.B) { benchBareRedis(b) })
	b.Run("redis", func(b *testing.B) { benchIdem(b, benchRedis(b)) })
}

func benchRedis(b *testing.B) storage.Store {
	redisstoretest.Client(b) // skips or fails when unreachable
	c := redis.NewClient(&redis.Options{Addr: redisstoretest.Addr(), PoolSize: benchConcurrency})
	b.Cleanup(func() { c.Close() })
	return redisstoretest.Store(b, c, redisstore.Config{})
}

// fill returns a new queue of b's own holding n messages with distinct
// keys, deleted when b ends.
func fill(b *testing.B, c *sqs.Client, n int) string {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	q := idemsqstest.Queue(b, c, map[string]string{"VisibilityTimeout": "30"})
	run := rand.Text()[:8]
	var wg sync.WaitGroup
	for start := 0; start < n; start += 10 {
		wg.Go(func() {
			entries := make([]types.SendMessageBatchRequestEntry, 0, 10)
			for i := start; i < min(start+10, n); i++ {
				k := fmt.Sprintf("order-%s-%08d", run, i)
				entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i - start)),
					MessageBody: aws.String(`{"type":"OrderCreated","order":"` + k + `","amount_cents":4200}`),
					MessageAttributes: map[string]types.MessageAttributeValue{
						"idempotency-key": {DataType: aws.String("String"), StringValue: aws.String(k)}}})
			}
			if _, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(q), Entries: entries}); err != nil {
				b.Error(err)
			}
		})
		if start%(10*benchConcurrency) == 0 {
			wg.Wait()
		}
	}
	wg.Wait()
	return q
}

// benchBare consumes with the SDK alone; handle, when not nil, runs in
// place of the no-op handler, and a message whose handle fails is not
// deleted.
func benchBare(b *testing.B, handle func(m types.Message) error) {
	c := client(b)
	q := fill(b, c, b.N)
	start := time.Now()
	var done atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range (benchConcurrency + maxReceive - 1) / maxReceive {
		wg.Go(func() {
			for ctx.Err() == nil && done.Load() < int64(b.N) {
				out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), MaxNumberOfMessages: 10,
					WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
				if err != nil {
					continue
				}
				var hw sync.WaitGroup
				ok := make([]bool, len(out.Messages))
				for i, m := range out.Messages {
					hw.Go(func() { ok[i] = handle == nil || handle(m) == nil })
				}
				hw.Wait()
				var entries []types.DeleteMessageBatchRequestEntry
				for i, m := range out.Messages {
					if ok[i] {
						entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
					}
				}
				if len(entries) > 0 {
					if _, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q), Entries: entries}); err == nil {
						done.Add(int64(len(entries)))
					}
				}
			}
		})
	}
	wg.Wait()
	report(b, b.N, time.Since(start))
}

// benchBareRedis is bare with a hand-rolled dedupe: the least a consumer
// that dedupes each message through Redis does, with no library: a SET NX
// PX of the key (a claim with a lease) and a SET PX of its outcome, one
// round trip each, without fencing, fingerprints, takeovers or an outcome
// to replay.
func benchBareRedis(b *testing.B) {
	redisstoretest.Client(b)
	rdb := redis.NewClient(&redis.Options{Addr: redisstoretest.Addr(), PoolSize: benchConcurrency})
	b.Cleanup(func() { rdb.Close() })
	prefix := redisstoretest.Prefix(b, rdb)
	ctx := context.Background()
	benchBare(b, func(m types.Message) error {
		key := aws.ToString(m.MessageAttributes["idempotency-key"].StringValue)
		set, err := rdb.SetNX(ctx, prefix+key, "1", time.Minute).Result()
		if err != nil || !set {
			return err
		}
		return rdb.Set(ctx, prefix+key, "done", 24*time.Hour).Err()
	})
}

// benchIdem consumes with idemsqs over s until every message is deleted.
func benchIdem(b *testing.B, s storage.Store) {
	c := client(b)
	q := fill(b, c, b.N)
	g, err := idem.New(s, idem.Config{Namespace: "bench-" + rand.Text()})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	var deleted atomic.Int64
	all := make(chan struct{})
	cons, err := idemsqs.New(g, c, q, func(context.Context, types.Message) error { return nil },
		idemsqs.WithSharedScope(), idemsqs.WithDiscardPoison(), idemsqs.WithConcurrency(benchConcurrency),
		idemsqs.WithWaitTime(time.Second), idemsqs.WithObserver(func(_ context.Context, e idemsqs.Event) {
			if e.Kind == idemsqs.EventDeleted && deleted.Add(1) == int64(b.N) {
				close(all)
			}
		}))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	<-all
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	report(b, b.N, elapsed)
}

func report(b *testing.B, n int, elapsed time.Duration) {
	b.ReportMetric(float64(n)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(0, "ns/op")
}
