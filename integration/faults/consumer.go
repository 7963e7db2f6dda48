package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// consumer is the consumer process: one of the K processes the harness
// starts, kills and restarts. It consumes the run's stream or queue through
// the broker's idem adapter (idemnats, idemamqp, idemkafka), with a Guard
// over the run's store, and applies each message's side effect to the
// ledger. It kills itself with SIGKILL at the point and count its spec
// names, and reports every step to the harness (events.go).
type consumer struct {
	spec   consumerSpec
	pid    int
	pool   *pgxpool.Pool // the ledger's, and pgstore's
	ledger ledger
	txg    *pgstore.TxGuard // modeTx
	hits   atomic.Int64     // times the kill point was reached
}

// handler is the broker-independent handling of one message. ack acks it
// at once (used only by the ack-first broken build).
type handler func(ctx context.Context, key string, payload []byte, ack func()) error

// consumeFuncs are the broker drivers' consumer sides, by broker name:
// each consumes with g, handling each message with c.handle (or c's other
// handlers, where the adapter runs its own transactions).
var consumeFuncs = map[string]func(ctx context.Context, s consumerSpec, g *idem.Guard, c *consumer) error{}

// consumeMain runs the consumer process until SIGTERM; its exit code.
func consumeMain() int {
	spec, err := specFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults consume:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := consume(ctx, spec); err != nil {
		fmt.Fprintln(os.Stderr, "faults consume:", err)
		return 1
	}
	return 0
}

func consume(ctx context.Context, spec consumerSpec) error {
	run, ok := consumeFuncs[spec.Broker]
	if !ok {
		return fmt.Errorf("broker %q is not built into this binary", spec.Broker)
	}
	c := &consumer{spec: spec, pid: os.Getpid()}
	pool, err := pgPool(ctx, spec.PGURL, spec.AppName, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	c.pool, c.ledger = pool, newLedger(pool, spec.Ledger)

	var store storage.Store
	switch spec.Store {
	case storePG, storePGTx:
		if store, err = pgstore.New(pool, pgstore.Config{Table: spec.Records}); err != nil {
			return err
		}
		if spec.Store == storePGTx {
			c.txg, err = pgstore.NewTxGuard(pool, idem.Config{Namespace: spec.Namespace + "-tx"},
				pgstore.TxConfig{Table: spec.Records})
			if err != nil {
				return err
			}
		}
	case storeRedis:
		rc := redis.NewClient(&redis.Options{Addr: spec.RedisAddr, DialTimeout: 500 * time.Millisecond,
			ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: 1})
		defer rc.Close()
		if store, err = redisstore.New(rc, redisstore.Config{Prefix: spec.RedisKeys}); err != nil {
			return err
		}
	case storeMem:
		ms, err := memstore.New(memstore.Config{})
		if err != nil {
			return err
		}
		defer ms.Close()
		store = ms
	default:
		return fmt.Errorf("unknown store %q", spec.Store)
	}
	var fs storage.Store = &faultStore{Store: store, c: c}
	if bs := newFaultBatchStore(fs.(*faultStore)); bs != nil {
		fs = bs
	}
	g, err := idem.New(fs, idem.Config{
		Namespace: spec.Namespace, Lease: spec.Lease, StoreTimeout: 2 * time.Second,
	})
	if err != nil {
		return err
	}
	defer g.Close()
	return run(ctx, spec, g, c)
}

// pgPool connects to url with every connection named appName, so that the
// harness can terminate exactly these backends.
func pgPool(ctx context.Context, url, appName string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	cfg.MaxConns = maxConns
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(cctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(cctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// point kills the process when it reaches its kill point for the KillAt-th
// time.
func (c *consumer) point(p, key string) {
	if p != c.spec.KillPoint || c.hits.Add(1) != int64(c.spec.KillAt) {
		return
	}
	events.emit(evKill, p, key)
	syscall.Kill(c.pid, syscall.SIGKILL)
	select {} // SIGKILL is not delivered synchronously: never go on
}

// handle is the side effect of one message, in the spec's mode.
func (c *consumer) handle(ctx context.Context, key string, payload []byte, ack func()) error {
	if c.spec.Broken == brokenAckFirst {
		ack()
	}
	c.point(killBeforeEffect, key)
	token, _ := idem.TokenFrom(ctx)
	switch c.spec.Mode {
	case modeTx:
		_, err := c.txg.Do(ctx, key, payload, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			var db execer = tx
			if c.spec.Broken == brokenOutsideTx {
				db = c.pool
			}
			events.emit(evRun, key)
			if err := c.ledger.apply(ctx, db, key, token, c.pid); err != nil {
				return nil, err
			}
			events.emit(evEffect, key)
			c.point(killAfterEffect, key)
			return []byte("ok"), nil
		})
		if err != nil {
			return err
		}
		c.point(killAfterCommit, key)
	case modeUnfenced:
		events.emit(evRun, key)
		if err := c.ledger.apply(ctx, c.pool, key, token, c.pid); err != nil {
			events.emit(evUnknown, key)
			return err
		}
		events.emit(evEffect, key)
		c.point(killAfterEffect, key)
	case modeFenced:
		events.emit(evRun, key)
		applied, err := true, error(nil)
		if c.spec.Broken == brokenNoFence {
			err = c.ledger.apply(ctx, c.pool, key, token, c.pid)
		} else {
			applied, err = c.ledger.applyFenced(ctx, c.pool, key, token, c.pid)
		}
		if err != nil {
			events.emit(evUnknown, key)
			return err
		}
		if !applied {
			// The effect was applied under another token: by a holder
			// that died before it stored the outcome, or lost its lease.
			// It is done; this holder stores the outcome.
			events.emit(evRefused, key)
			return nil
		}
		events.emit(evEffect, key)
		c.point(killAfterEffect, key)
	default:
		return fmt.Errorf("unknown mode %q", c.spec.Mode)
	}
	return nil
}

// handleInTx is the side effect of one message in tx, a transaction the
// adapter runs (kafkapg's, which commits the message's outcome and its
// partition's offset with it).
func (c *consumer) handleInTx(ctx context.Context, tx pgx.Tx, key string) error {
	c.point(killBeforeEffect, key)
	token, _ := idem.TokenFrom(ctx)
	var db execer = tx
	if c.spec.Broken == brokenOutsideTx {
		db = c.pool
	}
	events.emit(evRun, key)
	if err := c.ledger.apply(ctx, db, key, token, c.pid); err != nil {
		return err
	}
	events.emit(evEffect, key)
	c.point(killAfterEffect, key)
	return nil
}

// faultStore is the consumer's store with its kill points before the
// claim and after the outcome, and the events of both.
type faultStore struct {
	storage.Store
	c *consumer
}

// key is the message key of a store key: the harness's keys are the last
// part of the store key, after the namespace and the empty scope.
func (s *faultStore) key(storeKey string) string {
	prefix := storage.StoreKey(s.c.spec.Namespace, "")
	if len(storeKey) >= len(prefix) && storeKey[:len(prefix)] == prefix {
		return storeKey[len(prefix):]
	}
	return storeKey
}

func (s *faultStore) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	key := s.key(a.Key)
	events.emit(evDelivery, key)
	s.c.point(killBeforeClaim, key)
	return s.Store.Claim(ctx, a)
}

func (s *faultStore) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	k := s.key(key)
	if err := s.Store.Complete(ctx, key, t, value, retention); err != nil {
		// Not stored (the lease was lost) or unknown (the store failed):
		// either way the key may run again.
		events.emit(evOutcomeErr, k)
		return err
	}
	events.emit(evOutcome, k, strconv.FormatUint(uint64(t), 10))
	s.c.point(killAfterOutcome, k)
	return nil
}

// faultBatchStore is faultStore over a store with batch calls, which
// idemkafka's DoBatch uses: the same kill points and events, for each key
// of a batch.
type faultBatchStore struct {
	*faultStore
}

func newFaultBatchStore(s *faultStore) *faultBatchStore {
	return &faultBatchStore{faultStore: s}
}

// ClaimBatch reaches the before-claim point once for each key, before any
// is claimed, and the after-claim point once for each key it claimed,
// after the whole batch is claimed: idemamqp's claimer has not handed the
// batch's deliveries to its workers yet.
func (s *faultBatchStore) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	for _, a := range args {
		key := s.key(a.Key)
		events.emit(evDelivery, key)
		s.c.point(killBeforeClaim, key)
	}
	cls, err := s.Store.ClaimBatch(ctx, args)
	for i, cl := range cls {
		if err == nil && cl.Err == nil && cl.Outcome == storage.Acquired && i < len(args) {
			s.c.point(killAfterClaim, s.key(args[i].Key))
		}
	}
	return cls, err
}

// CompleteBatch reaches the after-outcome point once for each key whose
// outcome it stored, after the whole batch is stored.
func (s *faultBatchStore) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	errs, err := s.Store.CompleteBatch(ctx, cs)
	var stored []string
	for i, cm := range cs {
		k := s.key(cm.Key)
		if err != nil || (i < len(errs) && errs[i] != nil) {
			events.emit(evOutcomeErr, k)
			continue
		}
		events.emit(evOutcome, k, strconv.FormatUint(uint64(cm.Token), 10))
		stored = append(stored, k)
	}
	for _, k := range stored {
		s.c.point(killAfterOutcome, k)
	}
	return errs, err
}
