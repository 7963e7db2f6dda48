package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
)

// The work of every case: a payment-like operation whose 70-byte payload
// is fingerprinted with SHA-256 and whose outcome is 16 bytes.
const (
	storeBenchLease     = 30 * time.Second
	storeBenchRetention = 30 * time.Second // new keys' records expire by themselves in Redis
	storeBenchBatch     = 100
	storeBenchDups      = 1024 // completed keys the duplicate case cycles through
	storeBenchNamespace = "bench"
)

var (
	storeBenchPayload     = []byte(`{"order":"o-123456","amount":1200,"currency":"EUR","customer":"c-98"}`)
	storeBenchFingerprint = idem.SHA256Fingerprint(nil, storeBenchPayload)
	storeBenchResult      = []byte("ch_3MmlLrLkdIwHu")
	storeBenchDupKeys     = func() []string {
		keys := make([]string, storeBenchDups)
		for i := range keys {
			keys[i] = "dup-" + strconv.Itoa(i)
		}
		return keys
	}()
)

func storeBenchArgs(key string) storage.ClaimArgs {
	return storage.ClaimArgs{Key: key, Fingerprint: storeBenchFingerprint, Lease: storeBenchLease, Retention: storeBenchRetention}
}

func storeBenchFn(context.Context) ([]byte, error) { return storeBenchResult, nil }

// errTaken is a bare claim that found its new key taken: the run's keys
// collided, and the measure would be wrong.
var errTaken = errors.New("a new key was already taken")

// The store's side of the cases every store has, over stores that
// newStore makes for each phase: the duplicate case's newStore must
// return a store that holds the completed keys of prepareDuplicates.
type storeMaker func(ctx context.Context, g int) (storage.Store, func(), error)

func claimCompleteOp(s storage.Store) storeBenchOp {
	return func(ctx context.Context, w *storeBenchWorker, i int) error {
		key := w.key(i)
		c, err := s.Claim(ctx, storeBenchArgs(key))
		if err != nil {
			return err
		}
		if c.Outcome != storage.Acquired {
			return fmt.Errorf("claim of the new key %s: %v", key, c.Outcome)
		}
		return s.Complete(ctx, key, c.Token, storeBenchResult, storeBenchRetention)
	}
}

func claimBatchOp(b storage.Store) storeBenchOp {
	return func(ctx context.Context, w *storeBenchWorker, i int) error {
		args := make([]storage.ClaimArgs, storeBenchBatch)
		for j := range args {
			args[j] = storeBenchArgs(w.key(i*storeBenchBatch + j))
		}
		got, err := b.ClaimBatch(ctx, args)
		if err != nil {
			return err
		}
		for j, c := range got {
			if c.Outcome != storage.Acquired {
				return fmt.Errorf("ClaimBatch of the new key %s: %v", args[j].Key, c.Outcome)
			}
		}
		return nil
	}
}

func newStoreBenchGuard(s storage.Store) (*idem.Guard, error) {
	return idem.New(s, idem.Config{Namespace: storeBenchNamespace, Lease: storeBenchLease, Retention: storeBenchRetention})
}

// newCachedBenchGuard is newStoreBenchGuard with a local cache that holds
// every key of the duplicate case.
func newCachedBenchGuard(s storage.Store) (*idem.Guard, error) {
	return idem.New(s, idem.Config{Namespace: storeBenchNamespace, Lease: storeBenchLease, Retention: storeBenchRetention,
		CacheSize: 4 * storeBenchDups})
}

func guardDoOp(g *idem.Guard) storeBenchOp {
	return func(ctx context.Context, w *storeBenchWorker, i int) error {
		res, err := g.Do(ctx, w.key(i), storeBenchPayload, storeBenchFn)
		if err == nil && res.Replayed {
			err = errors.New("Do of a new key replayed")
		}
		return err
	}
}

func guardDuplicateOp(g *idem.Guard) storeBenchOp {
	return func(ctx context.Context, _ *storeBenchWorker, i int) error {
		res, err := g.Do(ctx, storeBenchDupKeys[i%storeBenchDups], storeBenchPayload, storeBenchFn)
		if err == nil && !res.Replayed {
			err = errors.New("Do of a completed key ran fn")
		}
		return err
	}
}

// once returns f made to run only once, at the first call: later calls
// return its error. The duplicate case prepares its keys this way, so a
// run without it does not make them.
func once(f func(ctx context.Context) error) func(context.Context) error {
	var o sync.Once
	var err error
	return func(ctx context.Context) error {
		o.Do(func() { err = f(ctx) })
		return err
	}
}

// prepareDuplicates completes the duplicate case's keys through a Guard
// over s, with a retention that outlasts the run.
func prepareDuplicates(ctx context.Context, s storage.Store) error {
	g, err := idem.New(s, idem.Config{Namespace: storeBenchNamespace, Retention: time.Hour})
	if err != nil {
		return err
	}
	defer g.Close()
	for _, k := range storeBenchDupKeys {
		if _, err := g.Do(ctx, k, storeBenchPayload, storeBenchFn); err != nil {
			return fmt.Errorf("completing the duplicate case's keys: %w", err)
		}
	}
	return nil
}

// storeSides returns the store's side of each case every store has. A
// store without ClaimBatch has no claim-batch case.
func storeSides(newStore, dupStore storeMaker) map[string]storeBenchSide {
	withGuard := func(makeStore storeMaker, newGuard func(storage.Store) (*idem.Guard, error), op func(*idem.Guard) storeBenchOp) storeBenchSide {
		return func(ctx context.Context, n int) (storeBenchOp, func(), error) {
			s, release, err := makeStore(ctx, n)
			if err != nil {
				return nil, nil, err
			}
			g, err := newGuard(s)
			if err != nil {
				release()
				return nil, nil, err
			}
			return op(g), func() { g.Close(); release() }, nil
		}
	}
	return map[string]storeBenchSide{
		"claim-complete": func(ctx context.Context, n int) (storeBenchOp, func(), error) {
			s, release, err := newStore(ctx, n)
			if err != nil {
				return nil, nil, err
			}
			return claimCompleteOp(s), release, nil
		},
		"claim-batch": func(ctx context.Context, n int) (storeBenchOp, func(), error) {
			s, release, err := newStore(ctx, n)
			if err != nil {
				return nil, nil, err
			}
			return claimBatchOp(s), release, nil
		},
		"do":           withGuard(newStore, newStoreBenchGuard, guardDoOp),
		"do-duplicate": withGuard(dupStore, newStoreBenchGuard, guardDuplicateOp),
		"do-cached":    withGuard(dupStore, newCachedBenchGuard, guardDuplicateOp),
	}
}

// cases pairs the store's sides with the bare ones, in the order of
// storeBenchCases; a case without both sides is left out.
func cases(storeSide, bareSide map[string]storeBenchSide) []storeBenchCase {
	titles := map[string]string{
		"claim-complete": "Claim+Complete",
		"claim-batch":    "ClaimBatch of 100",
		"do":             "Guard.Do, new key",
		"do-duplicate":   "Guard.Do, duplicate",
		"do-cached":      "Guard.Do, duplicate, cached",
		"txguard-do":     "TxGuard.Do",
	}
	var cs []storeBenchCase
	for _, name := range storeBenchCases {
		s, b := storeSide[name], bareSide[name]
		if s == nil || b == nil {
			continue
		}
		keys := 1
		if name == "claim-batch" {
			keys = storeBenchBatch
		}
		cs = append(cs, storeBenchCase{name: name, title: titles[name], keys: keys, store: s, bare: b})
	}
	return cs
}

// openStoreBenchTarget opens the store of raw with its cases; maxG is the
// most goroutines a phase runs.
func openStoreBenchTarget(ctx context.Context, raw string, maxG int) (*storeBenchTarget, error) {
	u, err := benchURL(raw)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "mem":
		if u.Host != "" || u.Path != "" || u.RawQuery != "" || u.Opaque != "" {
			return nil, usageErrorf("idem-bench: --store %s: mem:// takes no host, path or options", storeurl.Redact(raw))
		}
		return memBenchTarget(ctx)
	case "redis", "rediss":
		return redisBenchTarget(ctx, u.String(), maxG)
	case "postgres", "postgresql":
		return postgresBenchTarget(ctx, u.String())
	}
	return nil, usageErrorf("idem-bench: --store: unsupported scheme %q in %q (supported: mem://, redis://, rediss://, postgres://, postgresql://)",
		u.Scheme, storeurl.Redact(u.String()))
}

// memBenchTarget measures memstore beside a sync.Map: the least an
// in-process check can do, with no fingerprint, lease or context. Each
// phase gets a new store or map, so that a phase's records do not weigh
// on the next.
func memBenchTarget(ctx context.Context) (*storeBenchTarget, error) {
	dups, err := memstore.New(memstore.Config{})
	if err != nil {
		return nil, err
	}
	var dupMap sync.Map
	prepare := once(func(ctx context.Context) error {
		for _, k := range storeBenchDupKeys {
			dupMap.Store(k, storeBenchResult)
		}
		return prepareDuplicates(ctx, dups)
	})
	newStore := func(context.Context, int) (storage.Store, func(), error) {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	}
	dupStore := func(ctx context.Context, _ int) (storage.Store, func(), error) { return dups, func() {}, prepare(ctx) }

	claimComplete := func(context.Context, int) (storeBenchOp, func(), error) {
		var m sync.Map
		return func(_ context.Context, w *storeBenchWorker, i int) error {
			key := w.key(i)
			if _, loaded := m.LoadOrStore(key, nil); loaded {
				return errTaken
			}
			m.Store(key, storeBenchResult)
			return nil
		}, func() {}, nil
	}
	dupRead := func(ctx context.Context, _ int) (storeBenchOp, func(), error) {
		return func(_ context.Context, _ *storeBenchWorker, i int) error {
			if _, loaded := dupMap.LoadOrStore(storeBenchDupKeys[i%storeBenchDups], nil); !loaded {
				return errors.New("a completed key was missing")
			}
			return nil
		}, func() {}, prepare(ctx)
	}
	bare := map[string]storeBenchSide{
		"claim-complete": claimComplete,
		"do":             claimComplete,
		"claim-batch": func(context.Context, int) (storeBenchOp, func(), error) {
			var m sync.Map
			return func(_ context.Context, w *storeBenchWorker, i int) error {
				for j := range storeBenchBatch {
					if _, loaded := m.LoadOrStore(w.key(i*storeBenchBatch+j), nil); loaded {
						return errTaken
					}
				}
				return nil
			}, func() {}, nil
		},
		"do-duplicate": dupRead,
		"do-cached":    dupRead,
	}
	return &storeBenchTarget{url: "mem://", cases: cases(storeSides(newStore, dupStore), bare), close: dups.Close}, nil
}

// The bare Redis scripts: the least a Redis idempotency check can do with
// the fencing the store has, a claim that sets a new key with its lease
// (SET NX PX) and a complete that compares the token before it sets the
// outcome.
var (
	bareRedisClaim = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0`)
	bareRedisComplete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 0`)
)

// redisBenchTarget measures redisstore beside go-redis running the bare
// scripts by EVALSHA, on one client whose pool has a connection for each
// of maxG goroutines.
func redisBenchTarget(ctx context.Context, raw string, maxG int) (*storeBenchTarget, error) {
	u, _ := benchURL(raw)
	shown := storeurl.Redact(u.String())
	base := cmp.Or(u.Query().Get("prefix"), "idem-bench:")
	dropParam(u, "prefix")
	c, server, err := redisBenchClient(ctx, u, shown, maxG)
	if err != nil {
		return nil, err
	}
	prefix := base + strings.ToLower(rand.Text()[:12]) + ":"
	s, err := redisstore.New(c, redisstore.Config{Prefix: prefix + "store:"})
	if err != nil {
		c.Close()
		return nil, usageErrorf("idem-bench: --store %s: %v", shown, err)
	}
	bare := &redisBare{c: c, prefix: prefix}
	prepare := once(func(ctx context.Context) error {
		for _, k := range bare.dupKeys() {
			if err := c.Set(ctx, k, storeBenchResult, time.Hour).Err(); err != nil {
				return err
			}
		}
		return prepareDuplicates(ctx, s)
	})
	shared := func(context.Context, int) (storage.Store, func(), error) { return s, func() {}, nil }
	dupStore := func(ctx context.Context, _ int) (storage.Store, func(), error) { return s, func() {}, prepare(ctx) }
	return &storeBenchTarget{
		url:    shown,
		server: server,
		cases:  cases(storeSides(shared, dupStore), bare.sides(prepare)),
		memory: func(ctx context.Context) (*storeBenchMemory, error) { return redisMemoryPerRecord(ctx, c) },
		// The run's keys, store's and bare's, all under prefix: millions of
		// them after a long run, each kept for the retention. Left behind,
		// they would slow every SCAN of the server's other users for a day.
		close: func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return errors.Join(unlinkPrefix(ctx, c, prefix), c.Close())
		},
	}, nil
}

// redisBenchClient returns a client of the Redis at u (shown as shown)
// with a connection for each of maxG goroutines, made before any phase is
// timed, and the bare scripts loaded; and the server's name and version.
func redisBenchClient(ctx context.Context, u *url.URL, shown string, maxG int) (*redis.Client, string, error) {
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, "", usageErrorf("idem-bench: --store %s: %v", shown, err)
	}
	if !u.Query().Has("pool_size") {
		opts.PoolSize = maxG
	}
	c := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := c.Info(pctx, "server").Result()
	if err != nil {
		c.Close()
		return nil, "", fmt.Errorf("idem-bench: --store %s: cannot reach Redis: %w: %w", shown, idem.ErrStoreUnavailable, err)
	}
	server := "Redis"
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			server += " " + v
		}
	}
	var wg sync.WaitGroup
	for range maxG {
		wg.Go(func() { c.Ping(pctx) })
	}
	wg.Wait()
	for _, s := range []*redis.Script{bareRedisClaim, bareRedisComplete} {
		if err := s.Load(ctx, c).Err(); err != nil {
			c.Close()
			return nil, "", err
		}
	}
	return c, server, nil
}

// redisBare is the bare side of a Redis target: the bare scripts on c,
// over keys under prefix.
type redisBare struct {
	c      *redis.Client
	prefix string
}

func (b *redisBare) key(key string) string { return b.prefix + "bare:" + key }

// dupKeys are the keys of the completed records the duplicate case reads.
func (b *redisBare) dupKeys() []string {
	keys := make([]string, storeBenchDups)
	for i, k := range storeBenchDupKeys {
		keys[i] = b.key(k)
	}
	return keys
}

// sides are the bare sides of the cases; prepare writes the duplicates'
// records.
func (b *redisBare) sides(prepare func(context.Context) error) map[string]storeBenchSide {
	c, retention, dupKeys := b.c, storeBenchRetention.Milliseconds(), b.dupKeys()
	claimComplete := func(context.Context, int) (storeBenchOp, func(), error) {
		return func(ctx context.Context, w *storeBenchWorker, i int) error {
			key, token := b.key(w.key(i)), strconv.Itoa(i+1)
			ok, err := bareRedisClaim.Run(ctx, c, []string{key}, token, storeBenchLease.Milliseconds()).Int()
			if err != nil {
				return err
			}
			if ok != 1 {
				return errTaken
			}
			return bareRedisComplete.Run(ctx, c, []string{key}, token, storeBenchResult, retention).Err()
		}, func() {}, nil
	}
	return map[string]storeBenchSide{
		"claim-complete": claimComplete,
		"do":             claimComplete,
		"claim-batch": func(context.Context, int) (storeBenchOp, func(), error) {
			return func(ctx context.Context, w *storeBenchWorker, i int) error {
				p := c.Pipeline()
				cmds := make([]*redis.Cmd, storeBenchBatch)
				for j := range cmds {
					cmds[j] = bareRedisClaim.EvalSha(ctx, p, []string{b.key(w.key(i*storeBenchBatch + j))}, i*storeBenchBatch+j+1, storeBenchLease.Milliseconds())
				}
				if _, err := p.Exec(ctx); err != nil {
					return err
				}
				for _, cmd := range cmds {
					if ok, _ := cmd.Int(); ok != 1 {
						return errTaken
					}
				}
				return nil
			}, func() {}, nil
		},
		"do-duplicate": func(ctx context.Context, _ int) (storeBenchOp, func(), error) {
			return func(ctx context.Context, _ *storeBenchWorker, i int) error {
				return c.Get(ctx, dupKeys[i%storeBenchDups]).Err()
			}, func() {}, prepare(ctx)
		},
	}
}

// unlinkPrefix deletes every key of c's server under prefix.
func unlinkPrefix(ctx context.Context, c *redis.Client, prefix string) error {
	it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	keys := make([]string, 0, 1000)
	for it.Next(ctx) {
		if keys = append(keys, it.Val()); len(keys) == cap(keys) {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
			keys = keys[:0]
		}
	}
	if err := it.Err(); err != nil || len(keys) == 0 {
		return err
	}
	return c.Unlink(ctx, keys...).Err()
}

// redisMemoryPerRecord returns what MEMORY USAGE says a completed record
// takes, averaged over 100: the store's under its default prefix, for a
// Guard's key (namespace "orders", a 16-byte key), beside the bare
// scripts' record of the same key and outcome under the prefix "bare:".
// Each is deleted at once.
func redisMemoryPerRecord(ctx context.Context, c *redis.Client) (*storeBenchMemory, error) {
	s, err := redisstore.New(c, redisstore.Config{})
	if err != nil {
		return nil, err
	}
	const n = 100
	run := strings.ToLower(rand.Text()[:12])
	var m storeBenchMemory
	for i := range n {
		key := storage.StoreKey("orders", fmt.Sprintf("%s%04d", run, i))
		cl, err := s.Claim(ctx, storeBenchArgs(key))
		if err != nil {
			return nil, err
		}
		if err := s.Complete(ctx, key, cl.Token, storeBenchResult, time.Minute); err != nil {
			return nil, err
		}
		used, err := c.MemoryUsage(ctx, s.RedisKey(key), 0).Result()
		if err != nil {
			return nil, err
		}
		m.Store += float64(used) / n
		if err := s.Delete(ctx, key); err != nil {
			return nil, err
		}

		bk := "bare:" + key
		bareRedisClaim.Run(ctx, c, []string{bk}, "1", 60000)
		bareRedisComplete.Run(ctx, c, []string{bk}, "1", storeBenchResult, 60000)
		if used, err = c.MemoryUsage(ctx, bk, 0).Result(); err != nil {
			return nil, err
		}
		m.Bare += float64(used) / n
		c.Unlink(ctx, bk)
	}
	return &m, nil
}

// postgresBenchTarget measures pgstore beside pgx running the least the
// same work needs, on a table of the records table's shape (made by
// pgstore.Migrate too), in a schema of the run's own. Each phase gets a
// pool of one connection per goroutine, all connected before it is timed.
func postgresBenchTarget(ctx context.Context, raw string) (t *storeBenchTarget, err error) {
	u, _ := benchURL(raw)
	setup, err := openPool(ctx, u)
	if err != nil {
		return nil, err
	}
	schema := "idem_bench_" + strconv.FormatInt(time.Now().Unix(), 10) + "_" + strings.ToLower(rand.Text()[:8])
	dropSchema := func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, err := setup.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		setup.Close()
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, dropSchema())
		}
	}()
	b := &pgBench{setup: setup, cfg: setup.Config(),
		table: schema + "." + pgstore.DefaultTable, bareTable: schema + ".bare", ledger: schema + ".ledger"}
	if err := b.createTables(ctx, schema); err != nil {
		return nil, err
	}
	var version, syncCommit, fsync string
	err = setup.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync')`).
		Scan(&version, &syncCommit, &fsync)
	if err != nil {
		return nil, err
	}
	b.prepare = once(b.prepareDuplicates)
	return &storeBenchTarget{
		url:         storeurl.Redact(u.String()),
		server:      fmt.Sprintf("PostgreSQL %s  synchronous_commit=%s  fsync=%s", version, syncCommit, fsync),
		cases:       cases(b.storeSides(), b.bareSides()),
		close:       dropSchema,
		walPosition: b.walPosition,
	}, nil
}

// pgBench is the PostgreSQL target of a run: its tables, in the run's
// schema, and the pool that made them.
type pgBench struct {
	setup                    *pgxpool.Pool // the tables', the duplicates' and the WAL position's
	cfg                      *pgxpool.Config
	table, bareTable, ledger string
	prepare                  func(context.Context) error // the duplicates' records, once
}

// createTables creates schema with the store's table, the bare table of
// the same shape and the ledger that the same-transaction cases write to.
func (b *pgBench) createTables(ctx context.Context, schema string) error {
	if _, err := b.setup.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return err
	}
	for _, t := range []string{b.table, b.bareTable} {
		if err := pgstore.Migrate(ctx, b.setup, t); err != nil {
			return err
		}
	}
	_, err := b.setup.Exec(ctx, "CREATE TABLE "+b.ledger+" (id bigserial PRIMARY KEY, key text NOT NULL, amount int NOT NULL)")
	return err
}

// prepareDuplicates writes the completed records the duplicate cases
// read, the store's and the bare table's.
func (b *pgBench) prepareDuplicates(ctx context.Context) error {
	s, err := pgstore.New(b.setup, pgstore.Config{Table: b.table})
	if err != nil {
		return err
	}
	insert := `INSERT INTO ` + b.bareTable + ` (key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
		VALUES ($1, 2, 1, 1, $2, NULL, interval '1 hour', $3, now() + interval '1 hour')`
	for _, k := range storeBenchDupKeys {
		if _, err := b.setup.Exec(ctx, insert, []byte(k), storeBenchFingerprint, storeBenchResult); err != nil {
			return err
		}
	}
	return prepareDuplicates(ctx, s)
}

// insertLedger is the ledger write of the same-transaction cases.
func (b *pgBench) insertLedger() string {
	return "INSERT INTO " + b.ledger + " (key, amount) VALUES ($1, 10)"
}

// walPosition returns the server's WAL position, in bytes.
func (b *pgBench) walPosition(ctx context.Context) (int64, error) {
	var pos int64
	err := b.setup.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").Scan(&pos)
	return pos, err
}

// pool returns a pool of n connections, all of them connected.
func (b *pgBench) pool(ctx context.Context, n int) (*pgxpool.Pool, error) {
	c := b.cfg.Copy()
	c.MaxConns, c.MinConns = int32(n), 0
	p, err := pgxpool.NewWithConfig(ctx, c)
	if err != nil {
		return nil, err
	}
	conns := make([]*pgxpool.Conn, 0, n)
	for range n {
		conn, err := p.Acquire(ctx)
		if err != nil {
			for _, c := range conns {
				c.Release()
			}
			p.Close()
			return nil, err
		}
		conns = append(conns, conn)
	}
	for _, c := range conns {
		c.Release()
	}
	return p, nil
}

// onPool makes a side whose operation op makes over a pool of n
// connections, closed after the phase.
func (b *pgBench) onPool(op func(p *pgxpool.Pool) (storeBenchOp, error)) storeBenchSide {
	return func(ctx context.Context, n int) (storeBenchOp, func(), error) {
		p, err := b.pool(ctx, n)
		if err != nil {
			return nil, nil, err
		}
		o, err := op(p)
		if err != nil {
			p.Close()
			return nil, nil, err
		}
		return o, p.Close, nil
	}
}

// storeSides are pgstore's sides of the cases, and TxGuard's.
func (b *pgBench) storeSides() map[string]storeBenchSide {
	storeOn := func(ctx context.Context, n int) (storage.Store, func(), error) {
		p, err := b.pool(ctx, n)
		if err != nil {
			return nil, nil, err
		}
		s, err := pgstore.New(p, pgstore.Config{Table: b.table})
		if err != nil {
			p.Close()
			return nil, nil, err
		}
		return s, p.Close, nil
	}
	dupStoreOn := func(ctx context.Context, n int) (storage.Store, func(), error) {
		if err := b.prepare(ctx); err != nil {
			return nil, nil, err
		}
		return storeOn(ctx, n)
	}
	stores := storeSides(storeOn, dupStoreOn)
	stores["txguard-do"] = b.onPool(func(p *pgxpool.Pool) (storeBenchOp, error) {
		tg, err := pgstore.NewTxGuard(p, idem.Config{}, pgstore.TxConfig{Table: b.table})
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, w *storeBenchWorker, i int) error {
			key := w.key(i)
			res, err := tg.Do(ctx, key, storeBenchPayload, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				_, err := tx.Exec(ctx, b.insertLedger(), key)
				return storeBenchResult, err
			})
			if err == nil && res.Replayed {
				err = errors.New("TxGuard.Do of a new key replayed")
			}
			return err
		}, nil
	})
	return stores
}

// bareSides are pgx's sides of the cases: the least the same work needs.
func (b *pgBench) bareSides() map[string]storeBenchSide {
	claim := `INSERT INTO ` + b.bareTable + ` (key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
		VALUES ($1, 1, $2, 1, $3, now() + interval '30 seconds', interval '30 seconds', NULL, now() + interval '60 seconds')
		ON CONFLICT (key) DO NOTHING`
	complete := `UPDATE ` + b.bareTable + ` SET status = 2, result = $3, lease_until = NULL, expires_at = now() + interval '30 seconds'
		WHERE key = $1 AND token = $2`
	claimComplete := b.onPool(func(p *pgxpool.Pool) (storeBenchOp, error) {
		return func(ctx context.Context, w *storeBenchWorker, i int) error {
			key, token := []byte(w.key(i)), int64(i+1)
			tag, err := p.Exec(ctx, claim, key, token, storeBenchFingerprint)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return errTaken
			}
			_, err = p.Exec(ctx, complete, key, token, storeBenchResult)
			return err
		}, nil
	})
	return map[string]storeBenchSide{
		"claim-complete": claimComplete,
		"do":             claimComplete,
		"claim-batch":    b.onPool(b.bareClaimBatch),
		"do-duplicate": func(ctx context.Context, n int) (storeBenchOp, func(), error) {
			if err := b.prepare(ctx); err != nil {
				return nil, nil, err
			}
			return b.onPool(func(p *pgxpool.Pool) (storeBenchOp, error) {
				query := "SELECT status, result FROM " + b.bareTable + " WHERE key = $1"
				return func(ctx context.Context, _ *storeBenchWorker, i int) error {
					var status int16
					var result []byte
					return p.QueryRow(ctx, query, []byte(storeBenchDupKeys[i%storeBenchDups])).Scan(&status, &result)
				}, nil
			})(ctx, n)
		},
		"txguard-do": b.onPool(func(p *pgxpool.Pool) (storeBenchOp, error) {
			return func(ctx context.Context, w *storeBenchWorker, i int) error {
				key := w.key(i)
				return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, b.insertLedger(), key)
					return err
				})
			}, nil
		}),
	}
}

// bareClaimBatch is the bare side of claim-batch over p: one INSERT of a
// batch of keys from arrays.
func (b *pgBench) bareClaimBatch(p *pgxpool.Pool) (storeBenchOp, error) {
	batch := `INSERT INTO ` + b.bareTable + ` (key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
		SELECT k, 1, t, 1, f, now() + interval '30 seconds', interval '30 seconds', NULL, now() + interval '60 seconds'
		FROM unnest($1::bytea[], $2::bigint[], $3::bytea[]) AS u(k, t, f)
		ON CONFLICT (key) DO NOTHING`
	return func(ctx context.Context, w *storeBenchWorker, i int) error {
		keys, tokens, fps := make([][]byte, storeBenchBatch), make([]int64, storeBenchBatch), make([][]byte, storeBenchBatch)
		for j := range keys {
			n := i*storeBenchBatch + j
			keys[j], tokens[j], fps[j] = []byte(w.key(n)), int64(n+1), storeBenchFingerprint
		}
		tag, err := p.Exec(ctx, batch, keys, tokens, fps)
		if err == nil && tag.RowsAffected() != storeBenchBatch {
			err = errTaken
		}
		return err
	}, nil
}

// dropParam removes the query parameter name from u: the drivers' URL
// parsers refuse (go-redis) or pass on to the server (pgx) the parameters
// that are idem's.
func dropParam(u *url.URL, name string) {
	q := u.Query()
	q.Del(name)
	u.RawQuery = q.Encode()
}

// openPool connects a pool to the database of u and checks that it
// answers.
func openPool(ctx context.Context, u *url.URL) (*pgxpool.Pool, error) {
	shown := storeurl.Redact(u.String())
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, usageErrorf("idem-bench: --store %s: %v", shown, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("idem-bench: --store %s: %w", shown, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("idem-bench: --store %s: cannot reach PostgreSQL: %w: %w", shown, storage.ErrStoreUnavailable, err)
	}
	return pool, nil
}
