package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// A partition run cuts a worker off from its store while it holds a lease,
// for longer than the lease, and measures what the Guard promises then.
// Two workers share a store: A reaches it through a link the harness cuts
// (a blackhole: its connections stay open and nothing passes), B directly.
// For each key, A claims it and its handler starts; the harness cuts A's
// link; B tries the key until the store lets it take over (once A's lease
// has run out on the store's clock), and applies the key's fenced effect.
// A's handler waits for its context to end, which A's local deadline (the
// lease end it last confirmed, less a margin) must bring about before B
// takes over; then, as a handler that ignores cancellation would, it
// writes its effect late, after B's, and returns success; the harness
// heals the link while A's outcome write waits in it. What is measured:
//
//	stopped first   A's handler was cancelled before B's handler started,
//	                and by how much
//	fenced          A's late effect was refused by the fence (another
//	                token applied the key's effect)
//	lease lost      A's Do returned ErrLeaseLost: its outcome write (and
//	                its heartbeat's extensions, delivered late) were refused
//	                by the token
//	effects         one per key
type partitionConfig struct {
	Name    string
	Profile string
	Store   string // storeRedis (a redis-server of the run's own) or storePG (the harness's PostgreSQL)
	Keys    int
	Lease   time.Duration
	Cut     time.Duration // how long A is cut off
}

// partitionReport is what one partition run showed.
type partitionReport struct {
	cfg          partitionConfig
	StoppedFirst int           // keys whose A stopped before B started
	MinMargin    time.Duration // the least time from A's stop to B's start
	MaxTakeover  time.Duration // the most time from the cut to B's start
	Fenced       int           // A's late effects the fence refused
	LeaseLost    int           // A's Do calls that returned ErrLeaseLost
	Duplicates   int
	Lost         int
	Elapsed      time.Duration
	otherAErrors []string
	failures
}

// runPartition runs one partition configuration.
func (h *harness) runPartition(ctx context.Context, cfg partitionConfig) (*partitionReport, error) {
	began := time.Now()
	id := randomID()
	schema := "idemfaults_" + id
	dir := filepath.Join(h.dir, id)
	l, err := createLedger(ctx, h.db, schema)
	if err != nil {
		return nil, err
	}
	defer h.dropRun(schema, dir)
	var upstream string
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	newStore := func(addr string) (storage.Store, error) {
		switch cfg.Store {
		case storeRedis:
			c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond,
				ReadTimeout: 2 * cfg.Cut, WriteTimeout: time.Second, MaxRetries: -1})
			closers = append(closers, func() { c.Close() })
			return redisstore.New(c, redisstore.Config{Prefix: "idemfaults:" + schema + ":"})
		case storePG:
			pcfg, err := pgxpool.ParseConfig(h.pgURL)
			if err != nil {
				return nil, err
			}
			pcfg.ConnConfig.Host, pcfg.ConnConfig.Port = splitPortU16(addr)
			pcfg.ConnConfig.Fallbacks = nil
			pcfg.MaxConns = 4
			p, err := pgxpool.NewWithConfig(ctx, pcfg)
			if err != nil {
				return nil, err
			}
			closers = append(closers, p.Close)
			return pgstore.New(p, pgstore.Config{Table: schema + ".idem_records"})
		}
		return nil, fmt.Errorf("unknown store %q", cfg.Store)
	}
	switch cfg.Store {
	case storeRedis:
		rs, err := newRedisServer(filepath.Join(dir, "redis"), "")
		if err != nil {
			return nil, err
		}
		closers = append(closers, rs.crash)
		upstream = rs.addr()
	case storePG:
		pcfg, err := pgxpool.ParseConfig(h.pgURL)
		if err != nil {
			return nil, err
		}
		upstream = fmt.Sprintf("%s:%d", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port)
		if err := pgstore.Migrate(ctx, h.db, schema+".idem_records"); err != nil {
			return nil, err
		}
	}
	lk, err := newLink(upstream, 0)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { lk.close() })
	gcfg := idem.Config{Namespace: "partition", Lease: cfg.Lease, StoreTimeout: 2 * cfg.Cut}
	var guards [2]*idem.Guard
	for i, addr := range []string{lk.addr(), upstream} {
		s, err := newStore(addr)
		if err != nil {
			return nil, err
		}
		if guards[i], err = idem.New(s, gcfg); err != nil {
			return nil, err
		}
		g := guards[i]
		closers = append(closers, func() { g.Close() })
	}
	rep := &partitionReport{cfg: cfg, MinMargin: -1}
	for i := range cfg.Keys {
		if err := partitionKey(ctx, fmt.Sprintf("p%04d", i), cfg, l, lk, guards[0], guards[1], rep); err != nil {
			return nil, err
		}
	}
	effects, err := l.effects(ctx)
	if err != nil {
		return nil, err
	}
	for i := range cfg.Keys {
		n := effects[fmt.Sprintf("p%04d", i)]
		if n == 0 {
			rep.Lost++
		}
		rep.Duplicates += max(n-1, 0)
	}
	if rep.StoppedFirst < cfg.Keys {
		rep.fail("%d of %d cut-off holders still ran when another took over", cfg.Keys-rep.StoppedFirst, cfg.Keys)
	}
	if rep.Fenced < cfg.Keys {
		rep.fail("%d of %d late effects were not refused by the fence", cfg.Keys-rep.Fenced, cfg.Keys)
	}
	if rep.LeaseLost < cfg.Keys {
		rep.fail("%d of %d cut-off holders' Do did not return ErrLeaseLost: %s", cfg.Keys-rep.LeaseLost, cfg.Keys,
			strings.Join(rep.otherAErrors[:min(3, len(rep.otherAErrors))], "; "))
	}
	if rep.Duplicates > 0 || rep.Lost > 0 {
		rep.fail("%d duplicate effects, %d keys without an effect", rep.Duplicates, rep.Lost)
	}
	rep.Elapsed = time.Since(began)
	return rep, nil
}

// partitionKey runs one key through A (cut off while it holds the key) and
// B (which takes it over).
func partitionKey(ctx context.Context, key string, cfg partitionConfig, l ledger, lk *link, a, b *idem.Guard, rep *partitionReport) error {
	holding := make(chan struct{})
	bApplied := make(chan struct{})
	var aStopped, bStarted, cutAt time.Time
	var lateApplied bool
	var lateErr error
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Do(ctx, key, nil, func(hctx context.Context) ([]byte, error) {
			close(holding)
			select {
			case <-hctx.Done():
				aStopped = time.Now()
			case <-time.After(cfg.Cut + 5*cfg.Lease):
				return nil, errors.New("the handler's context was not cancelled")
			}
			// A handler that does not heed its context writes late.
			select {
			case <-bApplied:
			case <-time.After(cfg.Cut + 5*cfg.Lease):
			}
			token, _ := idem.TokenFrom(hctx)
			lateApplied, lateErr = l.applyFenced(context.WithoutCancel(hctx), l.db, key, token, 1)
			return []byte("a"), nil
		})
		aDone <- err
	}()
	select {
	case <-holding:
	case <-ctx.Done():
		return ctx.Err()
	}
	lk.partition()
	cutAt = time.Now()
	healAt := time.AfterFunc(cfg.Cut, lk.heal)
	defer healAt.Stop()
	for {
		_, err := b.Do(ctx, key, nil, func(hctx context.Context) ([]byte, error) {
			bStarted = time.Now()
			token, _ := idem.TokenFrom(hctx)
			if _, err := l.applyFenced(hctx, l.db, key, token, 2); err != nil {
				return nil, err
			}
			close(bApplied)
			return []byte("b"), nil
		})
		if err == nil {
			break
		}
		if !errors.Is(err, idem.ErrInProgress) {
			return fmt.Errorf("B on %s: %w", key, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(10 * time.Millisecond)
	}
	aErr := <-aDone
	lk.heal()
	if lateErr != nil {
		return fmt.Errorf("A's late effect on %s: %w", key, lateErr)
	}
	if !lateApplied {
		rep.Fenced++
	}
	if errors.Is(aErr, idem.ErrLeaseLost) {
		rep.LeaseLost++
	} else {
		rep.otherAErrors = append(rep.otherAErrors, fmt.Sprint(aErr))
	}
	if !aStopped.IsZero() && aStopped.Before(bStarted) {
		rep.StoppedFirst++
		if m := bStarted.Sub(aStopped); rep.MinMargin < 0 || m < rep.MinMargin {
			rep.MinMargin = m
		}
	}
	rep.MaxTakeover = max(rep.MaxTakeover, bStarted.Sub(cutAt))
	return nil
}

func (r *partitionReport) line() string {
	return fmt.Sprintf("%-34s keys %d lease %v cut %v | holder stopped before takeover %d (least margin %v) | takeover after the cut within %v | late effects fenced %d | ErrLeaseLost %d | dup %d lost %d | %v | %s",
		r.cfg.Name, r.cfg.Keys, r.cfg.Lease, r.cfg.Cut, r.StoppedFirst, r.MinMargin.Round(time.Millisecond),
		r.MaxTakeover.Round(time.Millisecond), r.Fenced, r.LeaseLost, r.Duplicates, r.Lost, r.Elapsed.Round(100*time.Millisecond), r.verdict(true))
}

const partitionHeader = "| run (reproduce in integration/) | keys | lease, cut | holder stopped before takeover | least margin | takeover after the cut | late effects fenced | Do returned ErrLeaseLost | duplicate effects | lost | verdict |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|\n"

func (r *partitionReport) markdownRow() string {
	return fmt.Sprintf("| %s<br>`go run ./faults -profile %s -run '^%s$'` | %d | %v, %v | %d | %v | ≤ %v | %d | %d | %d | %d | %s |\n",
		r.cfg.Name, r.cfg.Profile, r.cfg.Name, r.cfg.Keys, r.cfg.Lease, r.cfg.Cut, r.StoppedFirst, r.MinMargin.Round(time.Millisecond),
		r.MaxTakeover.Round(time.Millisecond), r.Fenced, r.LeaseLost, r.Duplicates, r.Lost, r.verdict(false))
}

// partitionProfile returns the partition runs of the named profile.
func partitionProfile(name string) []partitionConfig {
	keys := 3
	if name == "full" {
		keys = 8
	}
	var out []partitionConfig
	for _, s := range []string{storeRedis, storePG} {
		out = append(out, partitionConfig{Name: "partition/" + s, Profile: name, Store: s, Keys: keys,
			Lease: time.Second, Cut: 2500 * time.Millisecond})
	}
	return out
}

// splitPortU16 splits host:port for pgconn.
func splitPortU16(addr string) (string, uint16) {
	h, p := splitPort(addr)
	return h, uint16(p)
}
