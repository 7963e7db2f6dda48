package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/pgstore"
)

//go:embed schema.sql
var schemaSQL string

// config is where the checkout keeps its state and sends its messages.
type config struct {
	postgres string        // PostgreSQL URL
	nats     string        // NATS URL
	schema   string        // PostgreSQL schema of every table
	stream   string        // JetStream stream
	subject  string        // subject of the charge messages
	ackWait  time.Duration // how long NATS waits for a consumer's ack before it redelivers
	dedup    time.Duration // the stream's duplicate window (0: JetStream's, 2m)
}

// checkout holds the connections and guards every role shares.
type checkout struct {
	cfg    config
	log    *slog.Logger
	pool   *pgxpool.Pool
	nc     *nats.Conn
	js     jetstream.JetStream
	orders *pgstore.TxGuard // POST /orders: the order and its message, once per request key
	charge *pgstore.TxGuard // the consumer's handler: the charge, once per message
	// deliveries is idemnats's Guard: each message handled once, then
	// acked. A short lease: a consumer that dies mid-charge holds its
	// message that long, and its heartbeat keeps a live one's.
	deliveries *idem.Guard
	box        *outbox.Outbox
}

// open connects to PostgreSQL and NATS and creates what is missing: the
// schema and its tables, the idempotency records, the outbox, the stream.
// Every step is idempotent, so every process of the checkout runs it.
func open(ctx context.Context, cfg config, log *slog.Logger) (*checkout, error) {
	c := &checkout{cfg: cfg, log: log}
	ok := false
	defer func() {
		if !ok {
			c.close()
		}
	}()
	var err error
	if c.pool, err = pgxpool.New(ctx, cfg.postgres); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	ident := pgx.Identifier{cfg.schema}.Sanitize()
	setup := "CREATE SCHEMA IF NOT EXISTS " + ident + "; SET LOCAL search_path TO " + ident + "; " + schemaSQL
	if err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('idem checkout setup'))"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, setup)
		return err
	}); err != nil {
		return nil, fmt.Errorf("postgres: creating the tables: %w", err)
	}
	if err := pgstore.Migrate(ctx, c.pool, c.table("idem_records")); err != nil {
		return nil, err
	}
	if err := outbox.Migrate(ctx, c.pool, c.table("outbox")); err != nil {
		return nil, err
	}
	if c.orders, err = c.txGuard("checkout.orders"); err != nil {
		return nil, err
	}
	if c.charge, err = c.txGuard("checkout.charges"); err != nil {
		return nil, err
	}
	store, err := pgstore.New(c.pool, pgstore.Config{Table: c.table("idem_records")})
	if err != nil {
		return nil, err
	}
	if c.deliveries, err = idem.New(store, idem.Config{Namespace: "checkout.deliveries", Lease: 5 * time.Second, Logger: c.log}); err != nil {
		return nil, err
	}
	if c.box, err = outbox.New(outbox.Config{Table: c.table("outbox")}); err != nil {
		return nil, err
	}

	// natspub wants a connection that never buffers publishes while it
	// reconnects (see its documentation).
	if c.nc, err = nats.Connect(cfg.nats, nats.ReconnectBufSize(-1), nats.MaxReconnects(-1), nats.Name("idem checkout")); err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	if c.js, err = jetstream.New(c.nc); err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	if _, err := c.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: cfg.stream, Subjects: []string{cfg.subject}, Storage: jetstream.FileStorage, Duplicates: cfg.dedup,
	}); err != nil {
		return nil, fmt.Errorf("nats: stream %s: %w", cfg.stream, err)
	}
	ok = true
	return c, nil
}

func (c *checkout) close() {
	if c.deliveries != nil {
		c.deliveries.Close()
	}
	if c.nc != nil {
		c.nc.Close()
	}
	if c.pool != nil {
		c.pool.Close()
	}
}

// table names a table of the checkout's schema.
func (c *checkout) table(name string) string { return c.cfg.schema + "." + name }

func (c *checkout) txGuard(namespace string) (*pgstore.TxGuard, error) {
	return pgstore.NewTxGuard(c.pool, idem.Config{Namespace: namespace, Logger: c.log},
		pgstore.TxConfig{Table: c.table("idem_records")})
}

// order is an order as the API returns it.
type order struct {
	ID          int64     `json:"id"`
	Customer    string    `json:"customer"`
	AmountCents int64     `json:"amount_cents"`
	CreatedAt   time.Time `json:"created_at"`
	Charged     *bool     `json:"charged,omitempty"` // GET only
}

// chargeRequest is the message the outbox carries to the consumer.
type chargeRequest struct {
	OrderID     int64  `json:"order_id"`
	Account     string `json:"account"`
	AmountCents int64  `json:"amount_cents"`
}

// api returns the HTTP API: POST /orders behind idemhttp, scoped by the
// account, and GET /orders/{id}. The middleware's Guard keeps its records
// in PostgreSQL too, beside the TxGuard's.
func (c *checkout) api() (http.Handler, func(), error) {
	store, err := pgstore.New(c.pool, pgstore.Config{Table: c.table("idem_records")})
	if err != nil {
		return nil, nil, err
	}
	g, err := idem.New(store, idem.Config{Namespace: "checkout.http", Wait: 10 * time.Second, Logger: c.log})
	if err != nil {
		return nil, nil, err
	}
	mw, err := idemhttp.New(g,
		idemhttp.WithRequired(),
		idemhttp.WithScope(func(r *http.Request) string { return account(r) }),
		idemhttp.WithMaxBodyBytes(64<<10),
	)
	if err != nil {
		g.Close()
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw(http.HandlerFunc(c.createOrder)))
	mux.HandleFunc("GET /orders/{id}", c.getOrder)
	return signedIn(mux), func() { g.Close() }, nil
}

type accountKey struct{}

func account(r *http.Request) string { s, _ := r.Context().Value(accountKey{}).(string); return s }

// signedIn takes the account from "Authorization: Bearer <account>": the
// demo's stand-in for real authentication, which must run before the
// idempotency middleware so that keys are scoped by a verified account.
func signedIn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acct, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if acct = strings.TrimSpace(acct); !found || acct == "" {
			problem(w, http.StatusUnauthorized, `send "Authorization: Bearer <account>"`)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accountKey{}, acct)))
	})
}

// createOrder handles POST /orders. In one transaction, TxGuard.DoTxScoped
// claims the request's key for the account, the order is inserted and its
// charge message enqueued, and the response is stored as the key's outcome:
// a retry that reaches the handler again (its first attempt crashed after
// the commit, before the middleware stored the response) gets the same
// order back instead of a second order and a second charge.
func (c *checkout) createOrder(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		problem(w, http.StatusBadRequest, "the body could not be read")
		return
	}
	var in struct {
		Customer    string `json:"customer"`
		AmountCents int64  `json:"amount_cents"`
	}
	if err := json.Unmarshal(body, &in); err != nil || strings.TrimSpace(in.Customer) == "" || in.AmountCents <= 0 {
		problem(w, http.StatusBadRequest, `want {"customer": "…", "amount_cents": a positive integer}`)
		return
	}
	key, err := idemhttp.ParseKey(r.Header.Get(idemhttp.DefaultHeader), idemhttp.Lenient)
	if err != nil { // the middleware refused it already; kept for a handler used without it
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	acct := account(r)
	var res idem.Result
	err = pgx.BeginFunc(r.Context(), c.pool, func(tx pgx.Tx) error {
		res, err = c.orders.DoTxScoped(r.Context(), tx, acct, key, body, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			o := order{Customer: in.Customer, AmountCents: in.AmountCents}
			err := tx.QueryRow(ctx, "INSERT INTO "+c.table("orders")+" (account, customer, amount_cents) VALUES ($1, $2, $3) RETURNING id, created_at",
				acct, o.Customer, o.AmountCents).Scan(&o.ID, &o.CreatedAt)
			if err != nil {
				return nil, err
			}
			msg, _ := json.Marshal(chargeRequest{OrderID: o.ID, Account: acct, AmountCents: o.AmountCents})
			err = c.box.Enqueue(ctx, tx, outbox.Message{
				ID:          "charge-" + strconv.FormatInt(o.ID, 10), // the consumer's idempotency key
				Destination: c.cfg.subject,
				Key:         acct, // an account's charges are published in order
				Headers:     map[string]string{"Content-Type": "application/json"},
				Payload:     msg,
			})
			if err != nil {
				return nil, err
			}
			return json.Marshal(o)
		})
		return err
	})
	switch {
	case errors.Is(err, idem.ErrKeyReused):
		problem(w, http.StatusUnprocessableEntity, "this Idempotency-Key was used with another request")
	case errors.Is(err, idem.ErrInProgress):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, "a request with this Idempotency-Key is in progress")
	case err != nil:
		c.log.ErrorContext(r.Context(), "checkout: creating an order", slog.Any("error", err))
		problem(w, http.StatusInternalServerError, "the order could not be created; retry with the same Idempotency-Key")
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(res.Value)
	}
}

// getOrder handles GET /orders/{id}: the account's order, and whether it
// was charged yet.
func (c *checkout) getOrder(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		problem(w, http.StatusNotFound, "no such order")
		return
	}
	var o order
	var charged bool
	err = c.pool.QueryRow(r.Context(), "SELECT id, customer, amount_cents, created_at, EXISTS (SELECT 1 FROM "+c.table("charges")+
		" WHERE order_id = o.id) FROM "+c.table("orders")+" o WHERE id = $1 AND account = $2", id, account(r)).
		Scan(&o.ID, &o.Customer, &o.AmountCents, &o.CreatedAt, &charged)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		problem(w, http.StatusNotFound, "no such order")
		return
	case err != nil:
		problem(w, http.StatusInternalServerError, "the order could not be read")
		return
	}
	o.Charged = &charged
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(o)
}

func problem(w http.ResponseWriter, status int, detail string) {
	idemhttp.WriteProblem(w, idemhttp.Problem{Status: status, Title: http.StatusText(status), Detail: detail})
}
