package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/natspub"
)

// hooks let the end-to-end test put crashes and lost acks where it wants
// them; nil fields do nothing, and the program never sets any.
type hooks struct {
	// publisher wraps the relay's publisher.
	publisher func(outbox.Publisher) outbox.Publisher
	// charging runs inside the charge's transaction, once the charge row
	// is written and before it commits.
	charging func(messageID string)
	// charged runs once a charge and its record committed, before the
	// handler returns (and the delivery's outcome is stored).
	charged func(messageID string)
	// dropAck, returning true, skips an ack the consumer sends: the
	// broker delivers the message again after the ack wait.
	dropAck func(messageID string) bool
}

// relay publishes the outbox to the stream until ctx ends.
func (c *checkout) relay(ctx context.Context, h hooks) error {
	pub, err := natspub.New(c.js)
	if err != nil {
		return err
	}
	var p outbox.Publisher = pub
	if h.publisher != nil {
		p = h.publisher(p)
	}
	relay, err := outbox.NewRelay(c.pool, p, outbox.RelayConfig{
		Table:             c.table("outbox"),
		RebalanceInterval: 500 * time.Millisecond,
		MaxBackoff:        2 * time.Second,
		Logger:            c.log,
		Observer: func(ctx context.Context, e outbox.Event) {
			if e.Op == outbox.OpLag && e.Pending > 0 {
				c.log.InfoContext(ctx, "checkout: outbox lag", slog.Int64("pending", e.Pending), slog.Duration("oldest", e.OldestPending))
			}
		},
	})
	if err != nil {
		return err
	}
	defer relay.Close()
	return relay.Run(ctx)
}

// consume charges the orders of the stream's messages until ctx ends,
// with an idemnats.Consumer over the durable consumer "charger". Two
// records guard a message, each for what it does best:
//
//   - idemnats claims the message's Nats-Msg-Id (the outbox message ID)
//     in c.deliveries, a Guard over the same PostgreSQL table: it runs
//     the handler once per ID at a time, acks only once the outcome is
//     stored, acks later copies from that outcome without running the
//     handler, naks a copy another consumer holds, keeps long charges
//     from being redelivered (InProgress) and terminates poison.
//   - the handler charges with TxGuard.DoScoped, keyed by the same ID in
//     the scope of the order's account: the charge row and its record
//     commit in one transaction. A Guard alone leaves a window, a consumer
//     killed after the charge committed and before the outcome was stored;
//     the copy that comes after its lease finds the charge's record here
//     and charges nothing.
func (c *checkout) consume(ctx context.Context, h hooks) error {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.cfg.stream, jetstream.ConsumerConfig{
		Durable:       "charger",
		FilterSubject: c.cfg.subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.cfg.ackWait,
		MaxAckPending: 256,
	})
	if err != nil {
		return fmt.Errorf("nats: consumer: %w", err)
	}
	var jc jetstream.Consumer = cons
	if h.dropAck != nil {
		jc = droppingAcks{Consumer: cons, drop: h.dropAck}
	}
	consumer, err := idemnats.New(c.deliveries, jc, func(ctx context.Context, m jetstream.Msg) error {
		return c.handle(ctx, m, h)
	},
		// The stream's only publisher is this service's relay, and the
		// IDs are the service's own ("charge-<order>"): one key space.
		// The charge's record is scoped by account all the same.
		idemnats.WithSharedScope(),
		// Poison (an undecodable message, its failure stored) is
		// terminated and logged, and stays in the stream.
		idemnats.WithDiscardPoison(),
		idemnats.WithLogger(c.log),
	)
	if err != nil {
		return err
	}
	return consumer.Run(ctx)
}

// handle charges the order of one message, once per message ID, and
// returns nil once the charge and its record are committed.
func (c *checkout) handle(ctx context.Context, m jetstream.Msg, h hooks) error {
	id := m.Headers().Get(jetstream.MsgIDHeader)
	var req chargeRequest
	if err := json.Unmarshal(m.Data(), &req); err != nil {
		// Stored as the ID's outcome and terminated: no copy of it will
		// ever decode.
		return idem.Permanent(fmt.Errorf("checkout: undecodable charge message: %w", err))
	}
	res, err := c.charge.DoScoped(ctx, req.Account, id, m.Data(), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		var chargeID int64
		err := tx.QueryRow(ctx, "INSERT INTO "+c.table("charges")+" (order_id, account, amount_cents, message_id) VALUES ($1, $2, $3, $4) RETURNING id",
			req.OrderID, req.Account, req.AmountCents, id).Scan(&chargeID)
		if err != nil {
			return nil, err
		}
		if h.charging != nil {
			h.charging(id)
		}
		return []byte("charge-" + strconv.FormatInt(chargeID, 10)), nil
	})
	if err != nil {
		return err // released; idemnats redelivers it after its retry delay
	}
	if h.charged != nil {
		h.charged(id)
	}
	if !res.Replayed {
		c.log.InfoContext(ctx, "checkout: charged", slog.Int64("order", req.OrderID), slog.String("receipt", string(res.Value)))
	}
	return nil
}

// droppingAcks is a jetstream.Consumer whose messages skip the acks drop
// returns true for, as if they were lost on the way: NATS delivers those
// messages again after the ack wait. For the tests.
type droppingAcks struct {
	jetstream.Consumer
	drop func(messageID string) bool
}

func (d droppingAcks) Fetch(batch int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	mb, err := d.Consumer.Fetch(batch, opts...)
	if err != nil {
		return nil, err
	}
	out := make(chan jetstream.Msg)
	go func() {
		defer close(out)
		for m := range mb.Messages() {
			out <- droppingAck{Msg: m, drop: d.drop}
		}
	}()
	return droppedBatch{MessageBatch: mb, msgs: out}, nil
}

type droppedBatch struct {
	jetstream.MessageBatch
	msgs chan jetstream.Msg
}

func (b droppedBatch) Messages() <-chan jetstream.Msg { return b.msgs }

type droppingAck struct {
	jetstream.Msg
	drop func(messageID string) bool
}

func (m droppingAck) Ack() error {
	if m.drop(m.Headers().Get(jetstream.MsgIDHeader)) {
		return nil
	}
	return m.Msg.Ack()
}
