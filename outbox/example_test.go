package outbox_test

import (
	"context"
	"encoding/json"
	"log"
	"os"
	"os/signal"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/outbox"
)

// A service writes an order and the message that announces it in one
// transaction: both commit, or neither.
func ExampleEnqueue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := outbox.Migrate(ctx, pool, outbox.DefaultTable); err != nil {
		log.Fatal(err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var orderID int64
		err := tx.QueryRow(ctx, "INSERT INTO orders (account, cents) VALUES ($1, $2) RETURNING id", "acct-7", 1250).Scan(&orderID)
		if err != nil {
			return err
		}
		body, _ := json.Marshal(map[string]any{"order": orderID, "cents": 1250})
		return outbox.Enqueue(ctx, tx, outbox.Message{
			ID:          "order-created-" + strconv.FormatInt(orderID, 10), // the consumer's idempotency key
			Destination: "orders.created",
			Key:         "acct-7", // an account's messages are published in order
			Headers:     map[string]string{"Content-Type": "application/json"},
			Payload:     body,
		})
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A relay publishes the outbox until the process is interrupted. Run one
// in every replica: they share the partitions of the table.
func ExampleRelay() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	var pub outbox.Publisher // natspub.New(js), kafkapub.New(client), amqppub.New(url)
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{
		Observer: func(ctx context.Context, e outbox.Event) {
			if e.Op == outbox.OpLag {
				log.Printf("outbox: %d pending, the oldest for %v", e.Pending, e.OldestPending)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer relay.Close()
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// An Outbox writes to a table of its own, here with a NOTIFY that wakes
// idle relays at commit rather than at their next poll.
func ExampleOutbox_Enqueue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ob, err := outbox.New(outbox.Config{Table: "billing.outbox", Notify: true})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// … the business writes …
	if err := ob.Enqueue(ctx, tx, outbox.Message{Destination: "invoices.issued", Key: "acct-7", Payload: []byte("{}")}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// An operator lists the dead rows, redrives those whose stream now exists
// and discards the rest: what an "outbox dead" command does.
func ExampleDead() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	dead, err := outbox.Dead(ctx, pool, outbox.DefaultTable, 100)
	if err != nil {
		log.Fatal(err)
	}
	var redrive, discard []int64
	for _, d := range dead {
		log.Printf("row %d: message %s to %s, %d attempts, dead since %v: %s",
			d.RowID, d.Message.ID, d.Message.Destination, d.Attempts, d.DeadAt, d.LastError)
		if d.Message.Destination == "orders.created" { // its stream was created since
			redrive = append(redrive, d.RowID)
		} else {
			discard = append(discard, d.RowID)
		}
	}
	if _, err := outbox.Redrive(ctx, pool, outbox.DefaultTable, redrive...); err != nil {
		log.Fatal(err)
	}
	if _, err := outbox.Discard(ctx, pool, outbox.DefaultTable, discard...); err != nil {
		log.Fatal(err)
	}
}
