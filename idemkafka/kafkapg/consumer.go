package kafkapg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka/internal/consume"
	"github.com/idemgo/idem/internal/chassis"
	"github.com/idemgo/idem/pgstore"
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
	offsets offsetsTable

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
		cfg.fail("New: Handler is nil")
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	errs := cfg.errs
	newTxGuard := func(logger *slog.Logger) (*pgstore.TxGuard, error) {
		return pgstore.NewTxGuard(nil, idem.Config{Namespace: cfg.namespace, Retention: cfg.retention, Logger: logger},
			pgstore.TxConfig{Table: cfg.recordsTable, LockTimeout: cfg.lockTimeout})
	}
	// The TxGuard's configuration checks the keys; the TxGuard logs with
	// the consumer's logger, known once the options are built.
	var keys idem.Config
	if tg, err := newTxGuard(nil); err != nil {
		errs = append(errs, err)
	} else {
		keys = tg.Config()
	}
	c := &Consumer{db: db, h: h}
	cc, err := consume.New("kafkapg", nil, keys, cfg.consumer, processor{c}, c.adjust)
	if err != nil {
		errs = append(errs, err)
	}
	offsets, err := parseOffsetsTable(cfg.offsetsTable)
	if err != nil {
		errs = append(errs, fmt.Errorf("kafkapg: WithOffsetsTable: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	tg, err := newTxGuard(cc.Logger())
	if err != nil {
		return nil, err
	}
	cfg.retention, cfg.lockTimeout = tg.Config().Retention, tg.TxConfig().LockTimeout
	c.c, c.cfg, c.tg, c.offsets = cc, cfg, tg, offsets
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

// batch handles items in one transaction, the fast way: the keyed records
// go through the TxGuard's DoBatchTx (their keys claimed in one statement,
// the handlers run, the outcomes stored in one statement), the records
// without a key through a savepoint each, and the offset is stored with
// them and committed. It stops, committing what came before, at a key busy
// under a plain Guard's lease or at a handler's retryable error. On
// anything that needs a record's writes undone alone (a permanent error),
// a dead letter or a key held by another transaction, it rolls back and
// asks for the careful path (fallback). An error of the database is an
// outage.
func (c processor) batch(ctx context.Context, p *consume.Partition, items []consume.Item) (done int, v chassis.Verdict, fallback bool) {
	tx, err := c.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, chassis.Outage(fmt.Errorf("kafkapg: begin: %w", err)), false
	}
	committed := false
	defer func() {
		if !committed {
			rollback(ctx, tx)
		}
	}()
	replayed := 0
	// commitTo commits the first n items, their offset with them.
	commitTo := func(n int) error {
		if err := c.commit(ctx, p, tx, items[n-1].Rec); err != nil {
			return err
		}
		committed = true
		p.Replayed(replayed)
		return nil
	}
	for i := 0; i < len(items); {
		n, stopErr, careful, err := c.runBatch(ctx, p, tx, items[i:], &replayed)
		i += n
		switch {
		case err != nil:
			return 0, chassis.Outage(err), false
		case careful:
			return 0, v, true
		case stopErr == nil:
			continue
		}
		// items[i] did not finish: the items before it commit, unless it
		// is poison (the careful path).
		v := p.Decide(ctx, items[i], idem.Result{}, stopErr)
		if v.Settle != chassis.Retry && !errors.Is(stopErr, consume.ErrDraining) {
			return 0, v, true
		}
		if i > 0 {
			if err := commitTo(i); err != nil {
				return 0, chassis.Outage(err), false
			}
		}
		return i, v, false
	}
	if err := commitTo(len(items)); err != nil {
		return 0, chassis.Outage(err), false
	}
	return len(items), chassis.Verdict{}, false
}

// runBatch runs the first records of items in tx, and counts the
// duplicates among them in replayed: one record without a key in a
// savepoint, or the run of keyed records that starts items through the
// TxGuard's DoBatchTx. It returns how many finished; stopErr, why the
// next did not (the handler's error, or ErrDraining); careful, for a
// record that needs the careful path (poison, or a key another
// transaction holds); err, the database's.
func (c processor) runBatch(ctx context.Context, p *consume.Partition, tx pgx.Tx, items []consume.Item, replayed *int) (n int, stopErr error, careful bool, err error) {
	if it := items[0]; !it.KeyOK {
		switch {
		case !it.Unguarded:
			return 0, nil, true, nil // poison
		case p.Draining():
			return 0, consume.ErrDraining, false, nil
		}
		if err := c.unguarded(ctx, p, tx, it); err != nil {
			return 0, err, false, nil
		}
		return 1, nil, false, nil
	}
	j := 0
	for j < len(items) && items[j].KeyOK {
		j++
	}
	run := items[:j]
	ops := make([]idem.BatchOp, len(run))
	for k, it := range run {
		ops[k] = idem.BatchOp{Scope: it.Scope, Key: it.Key, Payload: it.Payload}
	}
	res, n, err := c.tg.DoBatchTx(ctx, tx, ops, func(ctx context.Context, tx pgx.Tx, k int) ([]byte, error) {
		if p.Draining() {
			return nil, consume.ErrDraining
		}
		return nil, c.handle(ctx, p, handlerTx{tx}, run[k])
	})
	switch {
	case errors.Is(err, idem.ErrInProgress):
		return 0, nil, true, nil // a key held by another transaction: the careful path finds which
	case err != nil:
		return 0, nil, false, err
	}
	for _, r := range res[:n] {
		if r.Err != nil {
			return 0, nil, true, nil // key reused, refused, or a stored failure to dead-letter again
		}
		if r.Replayed {
			*replayed++
		}
	}
	switch {
	case n == len(run):
		return n, nil, false, nil
	case res[n].Err == nil:
		return 0, nil, true, nil // a stop without a cause: the careful path
	}
	return n, res[n].Err, false, nil
}

// handle runs the handler for the record of it with tx.
func (c processor) handle(ctx context.Context, p *consume.Partition, tx pgx.Tx, it consume.Item) error {
	return p.Run(ctx, it, func(ctx context.Context) error { return c.h(ctx, tx, it.Rec) })
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
			return done, chassis.Outage(err)
		}
		return done, v
	}
	for i, it := range items {
		if p.Draining() {
			return stop(i, chassis.Outage(consume.ErrDraining))
		}
		if tx == nil {
			var err error
			if tx, err = c.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}); err != nil {
				return done, chassis.Outage(fmt.Errorf("kafkapg: begin: %w", err))
			}
		}
		var v chassis.Verdict
		switch {
		case it.KeyOK:
			res, err := c.tg.DoTxScoped(ctx, tx, it.Scope, it.Key, it.Payload, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				return nil, c.handle(ctx, p, handlerTx{tx}, it)
			})
			v = p.Decide(ctx, it, res, err)
		case it.Unguarded:
			v = p.Decide(ctx, it, idem.Result{}, c.unguarded(ctx, p, tx, it))
		default:
			v = p.Unkeyed(it)
		}
		if v, ok := p.Settle(ctx, it, v); !ok {
			return stop(i, v)
		}
		if perRecord {
			if err := finish(i + 1); err != nil {
				return done, chassis.Outage(err)
			}
		}
	}
	if err := finish(len(items)); err != nil {
		return done, chassis.Outage(err)
	}
	return done, chassis.Verdict{}
}

// unguarded runs the handler for a record without a key, in a savepoint:
// its writes commit with the offset (so exactly once, too), or are undone
// alone.
func (c processor) unguarded(ctx context.Context, p *consume.Partition, tx pgx.Tx, it consume.Item) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w: savepoint: %w", idem.ErrStoreUnavailable, err)
	}
	if err := c.handle(ctx, p, handlerTx{sp}, it); err != nil {
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
