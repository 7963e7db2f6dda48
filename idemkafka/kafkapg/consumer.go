package kafkapg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka/internal/consume"
	"github.com/idemgo/idem/internal/adapter"
	"github.com/idemgo/idem/internal/chassis"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
)

// Handler makes the business writes of one record with tx, the consumer's
// transaction, which also stores the record's outcome and its partition's
// offset: they all commit, or none does. It must not commit or roll back
// tx. nil stores the key as done; an error marked with idem.Permanent
// undoes the record's writes, stores the key as failed and dead-letters
// the record; any other error undoes them and the record is tried again
// after a backoff. A handler may run more than once for a record (a
// rolled-back try, a crash before the commit), but its writes commit once.
type Handler func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error

// DB is what the consumer begins its transactions on and reads the stored
// offsets with: a *pgxpool.Pool, with at least as many connections as
// partitions one member handles at once.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Consumer consumes records with a kgo.Client in a consumer group and runs
// a [Handler] for each exactly once into PostgreSQL. Create one with
// [New], create the client with its [Consumer.ClientOpts], then
// [Consumer.Run].
type Consumer struct {
	c       *consume.Consumer
	db      DB
	h       Handler
	cfg     config
	tg      *pgstore.TxGuard
	keys    idem.Config // the TxGuard's: its key checks and fingerprint
	offsets offsetsTable
	begin   string // BEGIN and the claim's lock timeout, one message

	afterCommit func(topic string, partition int32, next int64) // tests: a kill point
}

// New returns a consumer that runs h for each record in a transaction on
// db. It fails when db or h is nil, when no scope decision or no poison
// decision was passed (idemkafka.WithScope or idemkafka.WithSharedScope;
// idemkafka.WithDeadLetter or idemkafka.WithDiscardPoison; through
// [WithConsumerOptions]), or when an option is out of range; the error
// names each.
func New(db DB, h Handler, opts ...Option) (*Consumer, error) {
	var cfg config
	if db == nil {
		cfg.fail("New: db is nil")
	}
	if h == nil {
		cfg.fail("New: the Handler is nil")
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	errs := cfg.errs
	txConfig := func(logger *slog.Logger) pgstore.TxConfig {
		return pgstore.TxConfig{
			Config:      idem.Config{Namespace: cfg.namespace, Retention: cfg.retention, Logger: logger},
			Table:       cfg.recordsTable,
			LockTimeout: cfg.lockTimeout,
		}
	}
	// The TxGuard's configuration checks the keys; the TxGuard logs with
	// the consumer's logger, known once the options are built.
	var keys idem.Config
	if tg, err := pgstore.NewTxGuard(nil, txConfig(nil)); err != nil {
		errs = append(errs, err)
	} else {
		keys = tg.Config().Config
	}
	var o consume.Options
	if err := consume.Build(&o, "kafkapg", nil, keys, cfg.consumer); err != nil {
		errs = append(errs, err)
	}
	offsets, err := parseOffsetsTable(cfg.offsetsTable)
	if err != nil {
		errs = append(errs, fmt.Errorf("kafkapg: WithOffsetsTable: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	tg, err := pgstore.NewTxGuard(nil, txConfig(o.Logger()))
	if err != nil {
		return nil, err
	}
	cfg.retention, cfg.lockTimeout = tg.Config().Retention, tg.Config().LockTimeout
	c := &Consumer{db: db, h: h, cfg: cfg, tg: tg, keys: tg.Config().Config, offsets: offsets,
		begin: fmt.Sprintf("BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = %d", cfg.lockTimeout.Milliseconds())}
	c.c = consume.New(o, processor{c}, c.adjust)
	return c, nil
}

// ClientOpts returns the options to create the consuming kgo.Client with,
// after the caller's own: idemkafka's (rebalance callbacks,
// BlockRebalanceOnPoll, DisableAutoCommit) and kgo.AdjustFetchOffsetsFn,
// which starts each assigned partition at the offset stored in
// PostgreSQL. Run refuses a client created without them.
func (c *Consumer) ClientOpts() []kgo.Opt { return c.c.ClientOpts() }

// Run consumes with cl until ctx ends, then shuts down as idemkafka's
// Consumer.Run does. Each batch of a partition's fetched records (or each
// record, with [WithPerRecordTransactions]) is one transaction: the
// handlers' writes, the keys' outcomes and the partition's next offset.
func (c *Consumer) Run(ctx context.Context, cl *kgo.Client) error { return c.c.Run(ctx, cl) }

// processor is the consume.Processor of kafkapg.
type processor struct{ *Consumer }

func (c processor) Process(ctx context.Context, p *consume.Partition, items []consume.Item) (int, chassis.Verdict) {
	if c.cfg.perRecord || p.Failures(items[0].Rec) > 0 {
		// A record that failed before goes the careful path: its
		// failures count toward MaxAttempts there.
		return c.oneByOne(ctx, p, items, c.cfg.perRecord)
	}
	done, v, fallback := c.batch(ctx, p, items)
	if fallback {
		// A record failed, or is poison: the careful path, with a
		// savepoint per record, finds out which and keeps the rest.
		return c.oneByOne(ctx, p, items, false)
	}
	return done, v
}

// group returns the consuming client's group.
func group(p *consume.Partition) string {
	g, _ := p.Client().OptValue(kgo.ConsumerGroup).(string)
	return g
}

// batch handles items in one transaction, the fast way: the keys are
// claimed in one statement, the handlers run, the outcomes are stored in
// one statement with the offset, and it commits. It stops, committing
// what came before, at a key busy under a plain Guard's lease. On anything
// that needs a record's writes undone alone (a handler's error) or a dead
// letter, it rolls back and asks for the careful path (fallback); at a
// handler's retryable error, it keeps what came before (retryAt). An
// error of the database is an outage.
func (c processor) batch(ctx context.Context, p *consume.Partition, items []consume.Item) (done int, v chassis.Verdict, fallback bool) {
	o := c.c.Options()
	tx, err := c.db.BeginTx(ctx, pgx.TxOptions{BeginQuery: c.begin})
	if err != nil {
		return 0, consume.Outage(fmt.Errorf("kafkapg: begin: %w", err)), false
	}
	committed := false
	defer func() {
		if !committed {
			rollback(ctx, tx)
		}
	}()
	store, err := pgstore.New(tx, pgstore.Config{Table: c.cfg.recordsTable})
	if err != nil {
		return 0, consume.Outage(err), false
	}
	fps := make([][]byte, len(items))
	claimOf := make([]int, len(items)) // index into claims, or -1
	var args []storage.ClaimArgs
	first := map[string]int{} // store key → its first item
	lead := map[int]int{}     // item → the earlier item of the same key
	for i, it := range items {
		claimOf[i] = -1
		if !it.KeyOK {
			continue
		}
		if c.keys.CheckKey(it.Scope, it.Key) != nil {
			return 0, v, true // poison
		}
		k := storage.ScopedStoreKey(c.keys.Namespace, it.Scope, it.Key)
		fps[i] = c.keys.Fingerprint(nil, o.Payload(it.Rec))
		if j, ok := first[k]; ok {
			lead[i] = j
			continue
		}
		first[k] = i
		claimOf[i] = len(args)
		args = append(args, storage.ClaimArgs{Key: k, Fingerprint: fps[i], Lease: c.keys.Lease, Retention: c.keys.Retention})
	}
	claims, err := store.ClaimBatch(ctx, args)
	if err != nil {
		return 0, consume.Outage(err), false
	}
	var comps []storage.Completion
	replayed := 0
	htx := handlerTx{tx}
	stop := len(items)
	var stopErr error
loop:
	for i, it := range items {
		if p.Draining() {
			stop, stopErr = i, consume.ErrDraining
			break
		}
		switch {
		case !it.KeyOK:
			if it.KeyErr != nil || !o.UnkeyedUnguarded() {
				return 0, v, true // poison
			}
			if err := c.handle(ctx, htx, it); err != nil {
				return c.retryAt(ctx, p, items, i, err, tx)
			}
		case claimOf[i] < 0: // the key of an earlier item: its duplicate
			if !bytes.Equal(fps[i], fps[lead[i]]) {
				return 0, v, true // key reused
			}
			replayed++
		default:
			cl := claims[claimOf[i]]
			switch {
			case cl.Err != nil, cl.Outcome == storage.Duplicate && cl.Record.Status != storage.StatusCompleted:
				return 0, v, true // key reused, or a stored failure to dead-letter again
			case cl.Outcome == storage.Duplicate:
				replayed++
			case cl.Outcome == storage.Busy:
				stop, stopErr = i, fmt.Errorf("%w (key %q, attempt %d): held by a lease", idem.ErrInProgress, it.Key, cl.Record.Attempt)
				break loop
			default:
				if err := c.handle(ctx, htx, it); err != nil {
					return c.retryAt(ctx, p, items, i, err, tx)
				}
				comps = append(comps, storage.Completion{Key: args[claimOf[i]].Key, Token: cl.Token, Retention: c.keys.Retention})
			}
		}
	}
	if acquiredFrom(claimOf[stop:], claims) {
		// The claims past the stop must not commit: a record left in
		// progress would hold its key until its lease ends. Before a busy
		// key the records are done again without them; when draining,
		// the records are left to the next owner.
		if stopErr != consume.ErrDraining {
			return c.retryAt(ctx, p, items, stop, stopErr, tx)
		}
		return 0, consume.Outage(stopErr), false
	}
	if stop < len(items) {
		v = p.Decide(ctx, idem.Result{}, stopErr, items[stop].Rec)
	}
	if stop == 0 {
		return 0, v, false
	}
	if len(comps) > 0 {
		errs, err := store.CompleteBatch(ctx, comps)
		if err == nil {
			err = errors.Join(errs...)
		}
		if err != nil {
			return 0, consume.Outage(fmt.Errorf("kafkapg: storing the outcomes: %w", err)), false
		}
	}
	if err := c.commit(ctx, p, tx, items[stop-1].Rec); err != nil {
		return 0, consume.Outage(err), false
	}
	committed = true
	p.Replayed(replayed)
	return stop, v, false
}

// handle runs the handler for the record of it with tx.
func (c processor) handle(ctx context.Context, tx pgx.Tx, it consume.Item) error {
	return c.c.Options().Handle(ctx, it, func(ctx context.Context) error { return c.h(ctx, tx, it.Rec) })
}

// acquiredFrom reports whether any of the claims of claimOf (indexes into
// claims, or -1 for an item without a claim of its own) was acquired.
func acquiredFrom(claimOf []int, claims []storage.Claim) bool {
	for _, k := range claimOf {
		if k >= 0 && claims[k].Err == nil && claims[k].Outcome == storage.Acquired {
			return true
		}
	}
	return false
}

// retryAt answers a handler's error at items[i] in batch: one that makes
// the record poison (permanent, or its last attempt) goes to the careful
// path (fallback); for any other, tx is rolled back, the records before i
// are done again in a transaction of their own, and items[i] waits for
// its retry.
func (c processor) retryAt(ctx context.Context, p *consume.Partition, items []consume.Item, i int, err error, tx pgx.Tx) (int, chassis.Verdict, bool) {
	v := p.Decide(ctx, idem.Result{}, err, items[i].Rec)
	if v.Verdict != adapter.Retry {
		return 0, v, true
	}
	rollback(ctx, tx)
	if i == 0 {
		return 0, v, false
	}
	n, pv, fallback := c.batch(ctx, p, items[:i])
	if fallback {
		n, pv = c.oneByOne(ctx, p, items[:i], false)
	}
	if n < i {
		return n, pv, false
	}
	return n, v, false
}

// commit stores the partition's next offset after last in tx and commits.
func (c processor) commit(ctx context.Context, p *consume.Partition, tx pgx.Tx, last *kgo.Record) error {
	b := &pgx.Batch{}
	c.storeOffset(b, group(p), last)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("kafkapg: storing the offset: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("kafkapg: commit: %w", err)
	}
	if c.afterCommit != nil {
		c.afterCommit(last.Topic, last.Partition, last.Offset+1)
	}
	return nil
}

// oneByOne handles items one after another through the TxGuard's DoTx,
// whose savepoints undo a failed record's writes alone: in one transaction
// (committed when it stops, or at the end), or in one per record.
func (c processor) oneByOne(ctx context.Context, p *consume.Partition, items []consume.Item, perRecord bool) (int, chassis.Verdict) {
	o := c.c.Options()
	var tx pgx.Tx
	done := 0 // items committed
	defer func() {
		if tx != nil {
			rollback(ctx, tx)
		}
	}()
	// finish commits the items up to n, when there are any since the last commit.
	finish := func(n int) error {
		if n == done {
			return nil
		}
		err := c.commit(ctx, p, tx, items[n-1].Rec)
		tx = nil
		if err != nil {
			return err
		}
		done = n
		return nil
	}
	// stop commits the items before i and returns the verdict v on
	// items[i], or an outage if the commit failed.
	stop := func(i int, v chassis.Verdict) (int, chassis.Verdict) {
		if err := finish(i); err != nil {
			return done, consume.Outage(err)
		}
		return done, v
	}
	for i, it := range items {
		if p.Draining() {
			return stop(i, consume.Outage(consume.ErrDraining))
		}
		if tx == nil {
			var err error
			if tx, err = c.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}); err != nil {
				return done, consume.Outage(fmt.Errorf("kafkapg: begin: %w", err))
			}
		}
		var v chassis.Verdict
		switch {
		case !it.KeyOK && (it.KeyErr != nil || !o.UnkeyedUnguarded()):
			v = o.DecideKey(it.KeyErr)
		case !it.KeyOK:
			v = p.Decide(ctx, idem.Result{}, c.unguarded(ctx, tx, it), it.Rec)
		default:
			res, err := c.tg.DoTxScoped(ctx, tx, it.Scope, it.Key, o.Payload(it.Rec), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				return nil, c.handle(ctx, handlerTx{tx}, it)
			})
			v = p.Decide(ctx, res, err, it.Rec)
		}
		switch v.Verdict {
		case adapter.Ack:
			if v.Replayed {
				p.Replayed(1)
			}
		case adapter.DeadLetter:
			if err := p.Poison(ctx, it, v); err != nil {
				return stop(i, consume.Outage(err))
			}
		default:
			return stop(i, v)
		}
		if perRecord {
			if err := finish(i + 1); err != nil {
				return done, consume.Outage(err)
			}
		}
	}
	if err := finish(len(items)); err != nil {
		return done, consume.Outage(err)
	}
	return done, chassis.Verdict{}
}

// unguarded runs the handler for a record without a key, in a savepoint:
// its writes commit with the offset (so exactly once, too), or are undone
// alone.
func (c processor) unguarded(ctx context.Context, tx pgx.Tx, it consume.Item) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w: savepoint: %w", idem.ErrStoreUnavailable, err)
	}
	if err := c.handle(ctx, handlerTx{sp}, it); err != nil {
		rollback(ctx, sp)
		return err
	}
	if err := sp.Commit(ctx); err != nil {
		return fmt.Errorf("%w: release savepoint: %w", idem.ErrStoreUnavailable, err)
	}
	return nil
}

// rollback ends tx, detached from ctx's cancellation: a revoked partition
// must not leave a transaction open.
func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}
