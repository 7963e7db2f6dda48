package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what [Enqueue] and [Migrate] write with. pgx.Tx satisfies it, and
// so do *pgxpool.Pool and *pgx.Conn. Enqueue belongs in the caller's
// transaction (a pgx.Tx): the messages commit with the business writes, or
// not at all. Over a pool or a connection they commit at once, on their
// own.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Config configures an [Outbox]. The zero value means every default.
type Config struct {
	// Table is the outbox table, created by [Migrate]: a name or
	// schema.name, each part either unquoted (lowercase ASCII letters,
	// digits and underscores, not starting with a digit) or in double
	// quotes ("Outbox"; no single quote, dollar sign or backslash in it),
	// at most 48 bytes, as pgstore's. Default
	// [DefaultTable], found through the connection's search_path. The
	// Relay that publishes it must name the same table.
	Table string

	// Notify adds a NOTIFY to Enqueue, which wakes idle relays the moment
	// the transaction commits, instead of at their next poll (within
	// RelayConfig.PollInterval, 100ms by default). It costs every
	// enqueuing transaction: PostgreSQL takes a database-wide lock while a
	// transaction that notified commits, so such transactions commit one
	// at a time, their WAL flush included. Many concurrent writers then
	// queue behind one another's commits, and a server whose flushes are
	// slow caps them at one commit per flush. Worth it when an idle outbox
	// must publish within milliseconds and writers are few. Default
	// false.
	Notify bool

	// MaxPayload is the largest payload, in bytes, that Enqueue accepts:
	// a larger one fails the call with a [*MessageError] wrapping
	// [ErrTooLarge], and nothing is written. Brokers refuse large messages
	// (NATS, Kafka: 1 MiB by default), and the relay holds a batch in
	// memory. Default [DefaultMaxPayload]; at most [MaxMaxPayload].
	MaxPayload int

	// CheckDestination, when set, is called by Enqueue with the
	// Destination of each message: an error refuses the message, as an
	// invalid field does, with a [*MessageError] that wraps it. Give it
	// the broker's own rule (natspub.CheckSubject, kafkapub.CheckTopic),
	// so that a message the broker could never take fails the caller's
	// transaction rather than reaching the dead rows (see [Dead]) once the
	// relay tries it. Default: none, any destination a [Message] allows.
	CheckDestination func(destination string) error
}

// Limits of Config.MaxPayload.
const (
	// DefaultMaxPayload is the payload cap of Enqueue by default: 1 MiB,
	// what NATS and Kafka accept by default.
	DefaultMaxPayload = 1 << 20
	// MaxMaxPayload is the highest Config.MaxPayload: a bytea column
	// holds less than 1 GiB.
	MaxMaxPayload = 1<<30 - 1<<20
)

// Outbox writes messages to one outbox table. It holds no connection and
// no goroutine; it is safe for concurrent use.
type Outbox struct {
	t         table
	notify    bool
	insert1   string
	insertN   string
	notifySQL string
	max       int // payload cap
	checkDest func(string) error
}

// New returns an Outbox for cfg. It fails when cfg.Table is not a valid
// name or cfg.MaxPayload is out of range; it does not touch the database
// (run [Migrate] once first).
func New(cfg Config) (*Outbox, error) {
	t, err := parseTable(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("outbox: Config.Table: %w", err)
	}
	if cfg.MaxPayload < 0 || cfg.MaxPayload > MaxMaxPayload {
		return nil, fmt.Errorf("outbox: Config.MaxPayload %d: must be 1 to %d (0: the default, %d)", cfg.MaxPayload, MaxMaxPayload, DefaultMaxPayload)
	}
	return &Outbox{
		t:         t,
		notify:    cfg.Notify,
		insert1:   t.render("insert_one"),
		insertN:   t.render("insert_many"),
		notifySQL: t.render("notify"),
		max:       cmp.Or(cfg.MaxPayload, DefaultMaxPayload),
		checkDest: cfg.CheckDestination,
	}, nil
}

// Table returns the outbox table's quoted, possibly schema-qualified name,
// for SQL of one's own.
func (o *Outbox) Table() string { return o.t.ident }

var defaultOutbox, _ = New(Config{})

// Enqueue writes msgs to [DefaultTable] with db, the caller's transaction,
// without a NOTIFY, with payloads of at most [DefaultMaxPayload] bytes: see
// [Outbox.Enqueue].
func Enqueue(ctx context.Context, db DB, msgs ...Message) error {
	return defaultOutbox.Enqueue(ctx, db, msgs...)
}

// Enqueue writes msgs to the outbox table with db, normally the caller's
// transaction, so that they are published if and only if it commits. The
// messages of one call are ordered among themselves as given. It is one
// round trip: the INSERT and, with Config.Notify, a NOTIFY that wakes the
// relays once the transaction commits (PostgreSQL sends it then, and once
// per transaction however many calls notified). Without it, the relays
// find the messages at their next poll.
//
// A message without an ID gets a random one ([NewID]). Enqueue validates
// every message before it writes any: a refused message fails the call with
// a [*MessageError] (wrapping [ErrInvalidMessage], [ErrTooLarge] for a
// payload over Config.MaxPayload, and the error of Config.CheckDestination
// for a destination it refused) and nothing is written.
// Database errors are wrapped with "outbox: Enqueue: ", and with
// [ErrUnavailable] when the server cannot serve now; inside a transaction
// such an error aborts it, as any failed statement does. Enqueue with no
// message does nothing.
func (o *Outbox) Enqueue(ctx context.Context, db DB, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if db == nil {
		return errors.New("outbox: Enqueue: db is nil")
	}
	insert, args, err := o.insert(msgs)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(insert, args...)
	if o.notify {
		b.Queue(o.notifySQL)
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return dbError("Enqueue", err)
	}
	return nil
}

// insert checks msgs, at least one, and returns the INSERT that writes
// them and its arguments.
func (o *Outbox) insert(msgs []Message) (string, []any, error) {
	if len(msgs) == 1 {
		m, err := check(0, msgs[0], o.max, o.checkDest)
		if err != nil {
			return "", nil, err
		}
		return o.insert1, []any{m.ID, m.Destination, []byte(m.Key), keyHash(m), encodeHeaders(m.Headers), payload(m)}, nil
	}
	var (
		ids, dests       = make([]string, len(msgs)), make([]string, len(msgs))
		keys, headers, p = make([][]byte, len(msgs)), make([][]byte, len(msgs)), make([][]byte, len(msgs))
		hashes           = make([]int64, len(msgs))
	)
	for i, m := range msgs {
		m, err := check(i, m, o.max, o.checkDest)
		if err != nil {
			return "", nil, err
		}
		ids[i], dests[i], keys[i], hashes[i] = m.ID, m.Destination, []byte(m.Key), keyHash(m)
		headers[i], p[i] = encodeHeaders(m.Headers), payload(m)
	}
	return o.insertN, []any{ids, dests, keys, hashes, headers, p}, nil
}

// payload returns m's payload, never nil: the column is NOT NULL.
func payload(m Message) []byte {
	if m.Payload == nil {
		return []byte{}
	}
	return m.Payload
}

// keyHash is the key_hash column of m: FNV-1a (32 bits) of its key, or of
// its ID when the key is empty, so that unkeyed messages spread over the
// partitions.
func keyHash(m Message) int64 {
	h := fnv.New32a()
	if m.Key != "" {
		h.Write([]byte(m.Key))
	} else {
		h.Write([]byte(m.ID))
	}
	return int64(h.Sum32())
}
