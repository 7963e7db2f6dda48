package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// BenchmarkEnqueueCost measures what Enqueue adds to a business
// transaction: the same transaction (BEGIN, one INSERT of an order, COMMIT)
// without it ("bare"), with one Enqueue ("enqueue": the INSERT of the
// message, one round trip) and with one Enqueue of an Outbox with
// Config.Notify ("enqueue-notify": the INSERT and a NOTIFY, still one
// round trip). Each round runs every case for 2s, interleaved,
// with 1 and with 16 concurrent clients; the metrics are the medians of
// the rounds' transactions per second and of each round's own ratio to
// bare. Run it with -benchtime 1x: one b.N does all the rounds.
//
//	go test -run '^$' -bench EnqueueCost -benchtime 1x ./outbox
func BenchmarkEnqueueCost(b *testing.B) {
	pool := pgstoretest.Pool(b, 20)
	table := outboxtest.Table(b, pool)
	orders := table[:len(table)-len(".outbox")] + ".orders"
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+orders+" (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, account text NOT NULL, cents bigint NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	quiet, err := outbox.New(outbox.Config{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	notify, err := outbox.New(outbox.Config{Table: table, Notify: true})
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"order":12345,"account":"acct-42","cents":1250,"currency":"EUR"}`)
	tx := func(ob *outbox.Outbox) func(i int64) error {
		return func(i int64) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				acct := fmt.Sprintf("acct-%d", i%1000)
				if _, err := tx.Exec(ctx, "INSERT INTO "+orders+" (account, cents) VALUES ($1, $2)", acct, 1250); err != nil {
					return err
				}
				if ob == nil {
					return nil
				}
				return ob.Enqueue(ctx, tx, outbox.Message{Destination: "orders.created", Key: acct, Payload: payload})
			})
		}
	}
	cases := []struct {
		name string
		fn   func(int64) error
	}{{"bare", tx(nil)}, {"enqueue", tx(quiet)}, {"enqueue-notify", tx(notify)}}
	for range b.N {
		for _, clients := range []int{1, 16} {
			rates := make([][]float64, len(cases))
			ratios := make([][]float64, len(cases))
			for round := range 5 {
				for j, c := range cases {
					rates[j] = append(rates[j], rate(b, clients, 2*time.Second, c.fn))
					ratios[j] = append(ratios[j], rates[0][round]/rates[j][round])
				}
			}
			for j, c := range cases {
				b.ReportMetric(median(rates[j]), fmt.Sprintf("%s-c%d-tx/s", c.name, clients))
				if j > 0 {
					b.ReportMetric(median(ratios[j]), fmt.Sprintf("%s-c%d-cost×", c.name, clients))
				}
			}
		}
	}
}

// rate runs fn from clients goroutines for d and returns calls per second.
func rate(b *testing.B, clients int, d time.Duration, fn func(int64) error) float64 {
	var n atomic.Int64
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if err := fn(n.Add(1)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
