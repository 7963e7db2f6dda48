package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// A failover run measures what a replicated store's failover costs: the
// harness starts a replicated deployment of its own (a Redis primary with
// two replicas and three Sentinels, or a PostgreSQL primary with a
// streaming standby), W workers in the harness's process run Guard.Do over
// K keys, each applying its side effect to the ledger, and once 40% of the
// keys are done the harness SIGKILLs the primary and a replica is promoted
// (by Sentinel, or by pg_ctl promote). The workers retry every Do that
// fails until it succeeds. Once every key is done, every key is delivered
// again, as a broker redelivers what it cannot know was handled: a key
// whose outcome the store still holds is answered from it; a key whose
// outcome the failover lost runs again.
//
// What it counts:
//
//	lost outcomes     keys whose Do had returned, and whose fn ran again
//	                  later: the store no longer held the outcome it had
//	                  acknowledged
//	duplicate effects effects beyond the first per key, in the ledger
//	in flight         keys whose Do was running at the kill, or returned
//	                  an error after it: their outcome's fate was unknown
//	lost messages     keys with no effect once every Do returned
//	resumed after     from the kill to the first Do that ran fn and stored
//	                  its outcome on the promoted primary (its fn started
//	                  once the old one refused connections)
//
// A duplicate effect is explained by a lost outcome or a key in flight; a
// run fails on a lost message, on a duplicate neither explains, and, where
// its configuration promises it (WaitReplicas, a synchronous standby), on
// a lost outcome.
type failoverConfig struct {
	Name    string
	Profile string
	Store   string // storeSentinel or storeStandby
	Mode    string // modeUnfenced, modeFenced, or modeTx (storeStandby: TxGuard)

	WaitReplicas int  // storeSentinel: redisstore.Config.WaitReplicas
	MinReplicas  int  // storeSentinel: the servers' min-replicas-to-write
	Sync         bool // storeStandby: synchronous_standby_names and synchronous_commit = on

	Delay   time.Duration // the replication link's delay each way
	Workers int
	Keys    int
	KillAt  float64 // the share of keys done when the primary is killed
	Lease   time.Duration
	Timeout time.Duration

	NoLoss bool // the configuration promises that no returned outcome is lost
}

// Replicated stores.
const (
	storeSentinel = "redis-sentinel" // a Redis primary, two replicas, three Sentinels
	storeStandby  = "pg-standby"     // a PostgreSQL primary and a streaming standby
)

// deployment is a replicated store the harness runs for one failover run.
type deployment interface {
	// do runs key through the deployment's Guard, with effect as the
	// side effect: in the TxGuard's transaction (db is the transaction),
	// or on its own (db is the ledger's pool).
	do(ctx context.Context, key string, effect func(ctx context.Context, db execer) error) (idem.Result, error)
	// ledger is where the effects land: the harness's PostgreSQL, or the
	// deployment's own (transactional mode).
	ledger() ledger
	// failover kills the primary, calling killing right before and dead
	// once the primary refuses connections, and returns once a replica is
	// promoted: what it did.
	failover(ctx context.Context, killing, dead func()) (string, error)
	close()
}

// failoverReport is what one failover run showed.
type failoverReport struct {
	cfg failoverConfig

	ReturnedAtKill int // keys whose Do had returned when the primary was killed
	InFlight       int // keys in flight at the kill, or whose Do failed after it
	LostOutcomes   int // keys whose fn ran again after their Do had returned
	Duplicates     int // effects beyond the first
	Unexplained    int // duplicates on keys neither lost nor in flight
	Refused        int // fenced effects refused: applied under another token
	Lost           int // keys with no effect
	DoErrors       int // Do calls that failed and were retried
	Resumed        time.Duration
	Failover       string
	Elapsed        time.Duration
	failures
}

// failures are where a run did not show what its configuration promises.
type failures []string

func (f *failures) fail(format string, a ...any) { *f = append(*f, fmt.Sprintf(format, a...)) }

func (f failures) ok() bool { return len(f) == 0 }

// verdict is "ok", or "FAIL", with the failures when long.
func (f failures) verdict(long bool) string {
	switch {
	case f.ok():
		return "ok"
	case long:
		return "FAIL: " + strings.Join(f, "; ")
	}
	return "FAIL"
}

// dropRun removes what a run left in the harness's PostgreSQL and
// directory, unless IDEMFAULTS_KEEP is set.
func (h *harness) dropRun(schema, dir string) {
	if os.Getenv("IDEMFAULTS_KEEP") != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dropSchema(ctx, h.db, schema)
	os.RemoveAll(dir)
}

// runFailover runs one failover configuration.
func (h *harness) runFailover(ctx context.Context, cfg failoverConfig) (*failoverReport, error) {
	id := randomID()
	schema := "idemfaults_" + id
	dir := filepath.Join(h.dir, id)
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var dep deployment
	var err error
	switch cfg.Store {
	case storeSentinel:
		dep, err = startSentinelDeployment(ctx, h, cfg, dir, schema)
	case storeStandby:
		dep, err = startStandbyDeployment(ctx, h, cfg, dir, schema)
	default:
		err = fmt.Errorf("unknown replicated store %q", cfg.Store)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		dep.close()
		h.dropRun(schema, dir)
	}()
	rep, err := (&failoverRun{cfg: cfg, dep: dep, l: dep.ledger()}).execute(ctx)
	if err != nil {
		return nil, err
	}
	rep.Elapsed = time.Since(began)
	return rep, nil
}

// failoverRun is one failover run in progress.
type failoverRun struct {
	cfg failoverConfig
	dep deployment
	l   ledger

	mu       sync.Mutex
	returned map[string]bool // keys whose Do returned
	running  map[string]int  // keys whose Do is running, with how many calls
	window   map[string]bool // keys in flight at the kill or failed after it
	rerun    map[string]bool // keys whose fn ran after their Do returned
	refused  int
	errs     int
	killed   time.Time
	dead     time.Time // the primary refused connections: a Do after this ran on the promoted one
	resumed  time.Time
	done     atomic.Int64
	killOnce sync.Once
	killErr  error
	what     string
}

func (f *failoverRun) execute(ctx context.Context) (*failoverReport, error) {
	f.returned, f.running, f.window, f.rerun = map[string]bool{}, map[string]int{}, map[string]bool{}, map[string]bool{}
	keys := make([]string, f.cfg.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	killAt := int64(float64(len(keys)) * f.cfg.KillAt)
	rep := &failoverReport{cfg: f.cfg}
	for pass := range 2 {
		ch := make(chan string)
		var wg sync.WaitGroup
		for range f.cfg.Workers {
			wg.Go(func() {
				for k := range ch {
					f.handle(ctx, k)
					if pass == 0 && f.done.Add(1) == killAt {
						f.killOnce.Do(func() { f.kill(ctx, rep) })
					}
				}
			})
		}
		for _, k := range keys {
			select {
			case ch <- k:
			case <-ctx.Done():
			}
		}
		close(ch)
		wg.Wait()
		if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("the run did not end within %v", f.cfg.Timeout)
		} else if err != nil {
			return nil, err
		}
		if f.killErr != nil {
			return nil, f.killErr
		}
	}
	effects, err := f.l.effects(ctx)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rep.LostOutcomes, rep.InFlight, rep.Refused, rep.DoErrors = len(f.rerun), len(f.window), f.refused, f.errs
	rep.Failover = f.what
	if !f.resumed.IsZero() {
		rep.Resumed = f.resumed.Sub(f.killed)
	}
	var unexplained []string
	for _, k := range keys {
		n := effects[k]
		if n == 0 {
			rep.Lost++
		}
		rep.Duplicates += max(n-1, 0)
		if n > 1 && !f.rerun[k] && !f.window[k] {
			rep.Unexplained += n - 1
			unexplained = append(unexplained, k)
		}
	}
	if rep.Lost > 0 {
		rep.fail("%d keys lost: no effect", rep.Lost)
	}
	if rep.Unexplained > 0 {
		rep.fail("%d duplicate effects on keys neither in flight at the kill nor with a lost outcome: %s",
			rep.Unexplained, strings.Join(unexplained[:min(5, len(unexplained))], ", "))
	}
	if f.cfg.NoLoss && rep.LostOutcomes > 0 {
		rep.fail("%d outcomes Do had returned were lost in the failover", rep.LostOutcomes)
	}
	if f.cfg.Mode != modeUnfenced && rep.Duplicates > 0 {
		rep.fail("%d duplicate effects where the effect is fenced or transactional", rep.Duplicates)
	}
	if f.resumed.IsZero() {
		rep.fail("no Do ran fn after the kill")
	}
	return rep, nil
}

// kill fails the primary over, noting which keys are in flight.
func (f *failoverRun) kill(ctx context.Context, rep *failoverReport) {
	f.what, f.killErr = f.dep.failover(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.killed = time.Now()
		rep.ReturnedAtKill = len(f.returned)
		for k := range f.running {
			f.window[k] = true
		}
	}, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.dead = time.Now()
	})
}

// handle runs key until its Do succeeds.
func (f *failoverRun) handle(ctx context.Context, key string) {
	for ctx.Err() == nil {
		f.mu.Lock()
		f.running[key]++
		f.mu.Unlock()
		var ranAfterKill bool
		_, err := f.dep.do(ctx, key, func(ctx context.Context, db execer) error {
			token, _ := idem.TokenFrom(ctx)
			f.mu.Lock()
			if f.returned[key] {
				f.rerun[key] = true
			}
			ranAfterKill = !f.dead.IsZero()
			f.mu.Unlock()
			if f.cfg.Mode != modeFenced {
				return f.l.apply(ctx, db, key, token, 0)
			}
			applied, err := f.l.applyFenced(ctx, db, key, token, 0)
			if err == nil && !applied {
				f.mu.Lock()
				f.refused++
				f.mu.Unlock()
			}
			return err
		})
		f.mu.Lock()
		if f.running[key]--; f.running[key] == 0 {
			delete(f.running, key)
		}
		killed := !f.killed.IsZero()
		if err == nil {
			f.returned[key] = true
			if ranAfterKill && f.resumed.IsZero() {
				f.resumed = time.Now()
			}
		} else {
			f.errs++
			if killed {
				f.window[key] = true
			}
		}
		f.mu.Unlock()
		if err == nil {
			return
		}
		if errors.Is(err, idem.ErrInProgress) || errors.Is(err, storage.ErrStoreUnavailable) || errors.Is(err, idem.ErrLeaseLost) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// line is the report as a line of the progress output.
func (r *failoverReport) line() string {
	return fmt.Sprintf("%-34s keys %d workers %d | returned at kill %d, lost outcomes %d | dup %d (in flight %d, unexplained %d) refused %d | lost %d | resumed after %v | do errors %d | %s | %v | %s",
		r.cfg.Name, r.cfg.Keys, r.cfg.Workers, r.ReturnedAtKill, r.LostOutcomes, r.Duplicates, r.InFlight, r.Unexplained,
		r.Refused, r.Lost, r.Resumed.Round(10*time.Millisecond), r.DoErrors, r.Failover, r.Elapsed.Round(100*time.Millisecond), r.verdict(true))
}

const failoverHeader = "| run (reproduce in integration/) | configuration | keys (workers) | returned at kill | lost outcomes | duplicate effects | in flight at kill | fence refusals | lost messages | resumed after | verdict |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|\n"

func (r *failoverReport) markdownRow() string {
	return fmt.Sprintf("| %s<br>`go run ./faults -profile %s -run '^%s$'` | %s | %d (%d) | %d | %d | %d | %d | %d | %d | %v | %s |\n",
		r.cfg.Name, r.cfg.Profile, r.cfg.Name, r.cfg.describe(), r.cfg.Keys, r.cfg.Workers, r.ReturnedAtKill, r.LostOutcomes,
		r.Duplicates, r.InFlight, r.Refused, r.Lost, r.Resumed.Round(10*time.Millisecond), r.verdict(false))
}

// describe says what the configuration is, in words.
func (c failoverConfig) describe() string {
	var parts []string
	switch c.Store {
	case storeSentinel:
		parts = append(parts, fmt.Sprintf("WaitReplicas %d", c.WaitReplicas))
		if c.MinReplicas > 0 {
			parts = append(parts, fmt.Sprintf("min-replicas-to-write %d", c.MinReplicas))
		}
	case storeStandby:
		if c.Sync {
			parts = append(parts, "synchronous standby")
		} else {
			parts = append(parts, "asynchronous standby")
		}
	}
	parts = append(parts, c.Mode)
	if c.Delay > 0 {
		parts = append(parts, fmt.Sprintf("link delayed %v each way", c.Delay))
	}
	return strings.Join(parts, ", ")
}

// failoverProfile returns the failover runs of the named profile.
func failoverProfile(name string) []failoverConfig {
	var base failoverConfig
	var runs []failoverConfig
	switch name {
	case "short":
		base = failoverConfig{Workers: 8, Keys: 600, KillAt: 0.4, Lease: time.Second, Timeout: 60 * time.Second, Delay: 20 * time.Millisecond}
		runs = []failoverConfig{
			{Name: "sentinel/wait1", Store: storeSentinel, Mode: modeUnfenced, WaitReplicas: 1, MinReplicas: 1, NoLoss: true},
			{Name: "standby/sync", Store: storeStandby, Mode: modeUnfenced, Sync: true, NoLoss: true},
		}
	case "full":
		base = failoverConfig{Workers: 16, Keys: 3000, KillAt: 0.4, Lease: time.Second, Timeout: 3 * time.Minute, Delay: 50 * time.Millisecond}
		runs = []failoverConfig{
			{Name: "sentinel/wait0-nodelay", Store: storeSentinel, Mode: modeUnfenced, Delay: -1},
			{Name: "sentinel/wait0", Store: storeSentinel, Mode: modeUnfenced},
			{Name: "sentinel/wait0-fenced", Store: storeSentinel, Mode: modeFenced},
			{Name: "sentinel/wait1", Store: storeSentinel, Mode: modeUnfenced, WaitReplicas: 1, MinReplicas: 1, NoLoss: true},
			{Name: "standby/async", Store: storeStandby, Mode: modeUnfenced},
			{Name: "standby/sync", Store: storeStandby, Mode: modeUnfenced, Sync: true, NoLoss: true},
			{Name: "standby/async-tx", Store: storeStandby, Mode: modeTx},
			{Name: "standby/sync-tx", Store: storeStandby, Mode: modeTx, Sync: true, NoLoss: true},
		}
	}
	var out []failoverConfig
	for _, r := range runs {
		c := base
		c.Name, c.Profile, c.Store, c.Mode = "failover/"+r.Name, name, r.Store, r.Mode
		c.WaitReplicas, c.MinReplicas, c.Sync, c.NoLoss = r.WaitReplicas, r.MinReplicas, r.Sync, r.NoLoss
		if r.Delay < 0 {
			c.Delay = 0
		}
		out = append(out, c)
	}
	return out
}
