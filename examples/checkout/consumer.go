package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
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
	// dropAck, returning true, skips the ack of a message that was
	// charged: the broker delivers it again after the ack wait.
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

// consume charges the orders of the stream's messages until ctx ends.
// Each message is handled with TxGuard.DoScoped, keyed by its Nats-Msg-Id
// (the outbox message ID) in the scope of its account: the charge row and
// the key's outcome commit in one transaction, so a message delivered
// again (a lost ack, a consumer killed mid-charge, a relay that published
// it twice) never charges twice. The message is acked only after the
// outcome committed.
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
	var inflight sync.WaitGroup
	cc, err := cons.Consume(func(m jetstream.Msg) {
		inflight.Add(1)
		defer inflight.Done()
		c.handle(ctx, m, h)
	})
	if err != nil {
		return fmt.Errorf("nats: consume: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
	inflight.Wait()
	return nil
}

// handle charges one message's order and acks it, or asks for it again.
func (c *checkout) handle(ctx context.Context, m jetstream.Msg, h hooks) {
	id := m.Headers().Get(jetstream.MsgIDHeader)
	var req chargeRequest
	if err := json.Unmarshal(m.Data(), &req); err != nil || id == "" {
		c.log.ErrorContext(ctx, "checkout: undecodable charge message; dropped", slog.String("id", id), slog.Any("error", err))
		m.Term()
		return
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
	switch {
	case err == nil:
		if h.dropAck != nil && h.dropAck(id) {
			return
		}
		if err := m.Ack(); err != nil {
			c.log.WarnContext(ctx, "checkout: ack failed; the message comes again and is answered from its outcome", slog.String("id", id), slog.Any("error", err))
		}
		if !res.Replayed {
			c.log.InfoContext(ctx, "checkout: charged", slog.Int64("order", req.OrderID), slog.String("receipt", string(res.Value)))
		}
	case ctx.Err() != nil:
		// Stopping: the transaction rolled back; the message comes again.
	case errors.Is(err, idem.ErrInProgress):
		m.NakWithDelay(time.Second) // another consumer holds it
	default:
		c.log.WarnContext(ctx, "checkout: charge failed; retrying", slog.String("id", id), slog.Any("error", err))
		m.NakWithDelay(2 * time.Second)
	}
}
