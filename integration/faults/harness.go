package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/idemkafka/kafkapg"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// broker is the harness's side of a message broker: the run's stream,
// queue or topic, its publisher, and what it still holds.
type broker interface {
	name() string
	target() string  // stream, queue or topic
	durable() string // shared consumer or group
	// upstreams are the host:ports the consumers reach the broker at: the
	// harness puts a proxy of its own in front of each.
	upstreams() ([]string, error)
	// consumerURL is what the consumers connect to, through the proxies
	// (their addresses, in the order of upstreams).
	consumerURL(proxies []string) string
	// probe reports whether the broker can be reached.
	probe(ctx context.Context) error
	setup(ctx context.Context, env brokerEnv) error
	publish(ctx context.Context, key string, payload []byte) error
	// unsettled is how many published messages are not acked yet.
	unsettled(ctx context.Context) (int, error)
	close(ctx context.Context) error
}

// crasher is a broker the harness runs itself, which it can crash: kill a
// node with SIGKILL while records flow and start it again on the same
// ports with the same data. crash returns once the broker is whole again,
// saying what it did.
type crasher interface {
	crash(ctx context.Context) (string, error)
}

// logger is a broker that can say how many messages its log holds: as
// many as were published, when a crash neither lost an acknowledged one
// nor wrote a producer's retry twice.
type logger interface {
	logged(ctx context.Context) (int, error)
}

// brokers are the brokers built into the harness, by name.
var brokers = map[string]func(run string) (broker, error){}

// brokerEnv is what a broker's setup may use of the run.
type brokerEnv struct {
	proxies []string      // the proxies' addresses, in the order of upstreams
	dir     string        // the run's directory
	db      *pgxpool.Pool // the harness's PostgreSQL
	offsets string        // schema.table of the consumed offsets kept in PostgreSQL (kafkapg), or ""
}

// harness is what every run shares.
type harness struct {
	consumerCmd []string // the command that starts a consumer process
	pgURL       string
	dir         string    // runs' files: consumer logs, redis data
	out         io.Writer // progress
	db          *pgxpool.Pool
}

// proc is one consumer process.
type proc struct {
	n        int
	cmd      *exec.Cmd
	done     chan struct{}
	plan     *killPlan // the scripted kill it was given, if any
	selfKill bool      // it reported its scripted kill
}

// run is one configuration's run in progress.
type run struct {
	h      *harness
	cfg    runConfig
	id     string
	schema string
	ledger ledger
	b      broker
	pxs    []*proxy
	rs     *redisServer
	spec   consumerSpec

	mu           sync.Mutex
	evs          []event
	keys         []string // published so far, each once
	published    int      // copies published
	procs        map[int]*proc
	nproc        int
	plan         []killPlan // scripted kills not handed out yet
	stopped      bool
	restarts     []restartResult      // of Redis
	lostAt       map[string]time.Time // key → the crash that lost its outcome
	pgTerminated int
	brokerDrops  int
	brokerKills  int
	procWG       sync.WaitGroup
}

type killPlan struct {
	point string
	at    int
}

// restartResult is what one Redis restart lost.
type restartResult struct {
	crash   time.Time
	checked int // outcomes stored before the crash and not lost earlier
	lost    []lostOutcome
}

// lostOutcome is an outcome stored at `at` and lost in a restart.
type lostOutcome struct {
	key string
	at  time.Time
}

// runOne runs one configuration and returns its report.
func (h *harness) runOne(ctx context.Context, cfg runConfig) (*report, error) {
	newBroker, ok := brokers[cfg.Broker]
	if !ok {
		return nil, fmt.Errorf("broker %q is not built into the harness", cfg.Broker)
	}
	r := &run{h: h, cfg: cfg, id: randomID(), procs: map[int]*proc{}, lostAt: map[string]time.Time{}}
	r.schema = "idemfaults_" + r.id
	var err error
	if r.b, err = newBroker(r.id); err != nil {
		return nil, err
	}
	defer r.teardown()
	began := time.Now()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	r.evs = append(r.evs, event{at: time.Now(), kind: evSetup, detail: time.Since(began).Round(100 * time.Millisecond).String()})
	return r.execute(ctx)
}

// randomID names a run: lowercase, so that it is a valid PostgreSQL name
// unquoted and a NATS stream name.
func randomID() string { return strings.ToLower(rand.Text()[:10]) }

func (r *run) setup(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(r.h.dir, r.id), 0o755); err != nil {
		return err
	}
	if _, err := r.h.db.Exec(ctx, "CREATE SCHEMA "+r.schema); err != nil {
		return err
	}
	r.ledger = newLedger(r.h.db, r.schema)
	if err := r.ledger.create(ctx); err != nil {
		return err
	}
	records := r.schema + ".idem_records"
	if r.cfg.Store == storePG || r.cfg.Store == storePGTx {
		if err := pgstore.Migrate(ctx, r.h.db, records); err != nil {
			return err
		}
	}
	if r.cfg.Store == storeRedis {
		var err error
		if r.rs, err = newRedisServer(filepath.Join(r.h.dir, r.id, "redis"), r.cfg.RedisFsync); err != nil {
			return err
		}
	}
	ups, err := r.b.upstreams()
	if err != nil {
		return err
	}
	env := brokerEnv{dir: filepath.Join(r.h.dir, r.id), db: r.h.db}
	for _, up := range ups {
		px, err := newProxy(up)
		if err != nil {
			return err
		}
		r.pxs = append(r.pxs, px)
		env.proxies = append(env.proxies, px.Addr())
	}
	var offsets string
	if r.cfg.Broker == "kafka" && r.cfg.Store == storePGTx {
		// kafkapg: the consumed offsets commit with the effects.
		offsets = r.schema + ".idem_kafka_offsets"
		if err := kafkapg.Migrate(ctx, r.h.db, offsets); err != nil {
			return err
		}
		env.offsets = offsets
	}
	if err := r.b.setup(ctx, env); err != nil {
		return err
	}
	r.spec = consumerSpec{
		Broker: r.cfg.Broker, BrokerURL: r.b.consumerURL(env.proxies), Target: r.b.target(), Durable: r.b.durable(),
		Store: r.cfg.Store, PGURL: r.h.pgURL, AppName: "idemfaults-" + r.id,
		Records: records, Offsets: offsets, Ledger: r.schema, RedisKeys: "idemfaults:" + r.id + ":", Namespace: "faults",
		Lease: r.cfg.Lease, BusyDelay: 200 * time.Millisecond, RetryDelay: 200 * time.Millisecond,
		Mode: r.cfg.Mode, Broken: r.cfg.Broken,
	}
	if r.rs != nil {
		r.spec.RedisAddr = r.rs.addr()
	}
	// The scripted kills, in random order, each on one of the first few
	// times its process reaches the point.
	for _, p := range r.cfg.points() {
		for range r.cfg.KillsPerPoint {
			r.plan = append(r.plan, killPlan{point: p, at: 1 + mrand.IntN(4)})
		}
	}
	mrand.Shuffle(len(r.plan), func(i, j int) { r.plan[i], r.plan[j] = r.plan[j], r.plan[i] })
	return nil
}

func (r *run) teardown() {
	r.stopAll()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, px := range r.pxs {
		px.Close()
	}
	if r.rs != nil {
		r.rs.crash()
	}
	r.b.close(ctx)
	if os.Getenv("IDEMFAULTS_KEEP") == "" {
		dropSchema(ctx, r.h.db, r.schema)
		os.RemoveAll(filepath.Join(r.h.dir, r.id))
	}
}

// execute publishes, injects the faults, waits until every message is
// handled and acked, stops the consumers and reports.
func (r *run) execute(ctx context.Context) (*report, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	for range r.cfg.Consumers {
		if err := r.startProc(); err != nil {
			return nil, err
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		if err := r.publishAll(ctx, start); err != nil {
			errs <- err
		}
	})
	wg.Go(func() {
		if err := r.injectFaults(ctx, start, r.cfg.PublishOver); err != nil {
			errs <- err
		}
	})
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	settled := r.awaitSettled(ctx)
	r.stopAll()
	elapsed := time.Since(start)
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	effects, err := r.ledger.effects(cctx)
	if err != nil {
		return nil, err
	}
	unsettled, err := r.b.unsettled(cctx)
	if err != nil {
		return nil, err
	}
	logged := -1
	if l, ok := r.b.(logger); ok {
		if logged, err = l.logged(cctx); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := r.analyze(effects, unsettled, elapsed)
	if logged >= 0 && logged != r.published {
		rep.fail("the broker's log holds %d messages, %d were published: a crash lost acknowledged ones or a retry wrote one twice", logged, r.published)
	}
	if !settled {
		rep.fail("the run did not settle within %v", r.cfg.Timeout)
	}
	if os.Getenv("IDEMFAULTS_KEEP") != "" {
		r.dumpEvents()
	}
	return rep, nil
}

// publishAll publishes the run's messages over cfg.PublishOver: every key
// once and a share of them a second time, later, as a producer's retry or
// a replayed batch would. When it is done and a scripted kill has not
// happened yet, it goes on publishing new keys at the same pace until it
// has, so that every kill point is reached (at most 4×cfg.Messages more:
// a Kafka group can take seconds to hand a dead member's partitions on).
func (r *run) publishAll(ctx context.Context, start time.Time) error {
	var keys []string
	for i := range r.cfg.Messages {
		keys = append(keys, fmt.Sprintf("m%06d", i))
	}
	copies := slices.Clone(keys)
	for _, k := range keys {
		if mrand.Float64() < r.cfg.Duplicates {
			i := slices.Index(copies, k)
			copies = slices.Insert(copies, i+1+mrand.IntN(len(copies)-i), k)
		}
	}
	publish := func(k string) error {
		r.mu.Lock()
		if !slices.Contains(r.keys, k) {
			r.keys = append(r.keys, k)
		}
		r.published++
		r.mu.Unlock()
		if err := r.b.publish(ctx, k, payload(k)); err != nil && ctx.Err() == nil {
			return fmt.Errorf("publishing %s: %w", k, err)
		}
		return nil
	}
	for i, k := range copies {
		if err := publish(k); err != nil {
			return err
		}
		pace(ctx, start, r.cfg.PublishOver*time.Duration(i+1)/time.Duration(len(copies)))
	}
	for extra := range 4 * r.cfg.Messages {
		if !r.killsOutstanding() || ctx.Err() != nil {
			break
		}
		if err := publish(fmt.Sprintf("m%06d", r.cfg.Messages+extra)); err != nil {
			return err
		}
		pace(ctx, time.Now(), r.cfg.PublishOver/time.Duration(r.cfg.Messages))
	}
	return nil
}

func payload(key string) []byte { return []byte(`{"key":"` + key + `","amount":100}`) }

// killsOutstanding reports whether a scripted kill has not happened yet.
func (r *run) killsOutstanding() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.plan) > 0 {
		return true
	}
	for _, p := range r.procs {
		if p.plan != nil && !p.selfKill {
			return true
		}
	}
	return false
}

// pace waits until start+at, or ctx's end.
func pace(ctx context.Context, start time.Time, at time.Duration) {
	t := time.NewTimer(time.Until(start.Add(at)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// injectFaults spreads the config's random kills and store and broker
// faults over the window from start.
func (r *run) injectFaults(ctx context.Context, start time.Time, window time.Duration) error {
	type fault struct {
		at   time.Duration
		kind string
	}
	var fs []fault
	add := func(n int, kind string) {
		for range n {
			fs = append(fs, fault{time.Duration(mrand.Int64N(int64(window))), kind})
		}
	}
	add(r.cfg.RandomKills, "kill")
	// Redis restarts come once outcomes have piled up, so that what one
	// loses says something.
	for range r.cfg.RedisRestarts {
		fs = append(fs, fault{window/3 + time.Duration(mrand.Int64N(int64(window*2/3))), "redis"})
	}
	add(r.cfg.PGTerminates, "pg")
	add(r.cfg.BrokerDrops, "broker")
	// Broker crashes come in the middle of the window: records flow
	// before, during and after each.
	for range r.cfg.BrokerKills {
		fs = append(fs, fault{window/4 + time.Duration(mrand.Int64N(int64(window/2))), "crash"})
	}
	slices.SortFunc(fs, func(a, b fault) int { return int(a.at - b.at) })
	for _, f := range fs {
		pace(ctx, start, f.at)
		if ctx.Err() != nil {
			return nil
		}
		var err error
		switch f.kind {
		case "kill":
			r.killRandom()
		case "redis":
			err = r.restartRedis(ctx)
		case "pg":
			err = r.terminateBackends(ctx)
		case "broker":
			n := 0
			for _, px := range r.pxs {
				n += px.Drop()
			}
			r.mu.Lock()
			r.brokerDrops += n
			r.mu.Unlock()
		case "crash":
			err = r.crashBroker(ctx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startProc starts one consumer process, with the next scripted kill.
func (r *run) startProc() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return nil
	}
	spec := r.spec
	var plan *killPlan
	if len(r.plan) > 0 {
		plan = &r.plan[0]
		spec.KillPoint, spec.KillAt = plan.point, plan.at
		r.plan = r.plan[1:]
	}
	r.nproc++
	n := r.nproc
	cmd, stdout, logf, err := startChild(r.h.consumerCmd, spec.env(), r.logPath(n))
	if err != nil {
		return fmt.Errorf("starting a consumer: %w", err)
	}
	p := &proc{n: n, cmd: cmd, done: make(chan struct{}), plan: plan}
	r.procs[n] = p
	r.procWG.Go(func() {
		readEvents(n, stdout, r.record)
		cmd.Wait()
		logf.Close()
		close(p.done)
		// A process that ended on its own, not by a signal, while the run
		// went on, gave up: status 1 is an error it returned (a server it
		// could not reach at start), anything else a crash of its own.
		exit := event{proc: n, at: time.Now(), kind: evExit}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Exited() {
			exit.detail = strconv.Itoa(ws.ExitStatus())
			exit.note = logTail(r.logPath(n), 5)
		}
		r.mu.Lock()
		delete(r.procs, n)
		if p.plan != nil && !p.selfKill {
			// Killed by the harness before its own kill: the next
			// process gets the kill instead.
			r.plan = append([]killPlan{*p.plan}, r.plan...)
		}
		restart := !r.stopped
		if r.stopped {
			exit.detail = ""
		}
		r.evs = append(r.evs, exit)
		r.mu.Unlock()
		if restart {
			if err := r.startProc(); err != nil {
				fmt.Fprintf(r.h.out, "  restarting a consumer: %v\n", err)
			}
		}
	})
	return nil
}

// startChild starts argv with env added to the harness's environment, its
// standard error in a new file at logPath, killed when the harness dies;
// it returns the command, its standard output and the log file, which the
// caller closes once the command has ended.
func startChild(argv []string, env, logPath string) (*exec.Cmd, io.ReadCloser, *os.File, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		logf.Close()
		return nil, nil, nil, err
	}
	return cmd, stdout, logf, nil
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// logPath is where process n's standard error goes.
func (r *run) logPath(n int) string {
	return filepath.Join(r.h.dir, r.id, "consumer-"+strconv.Itoa(n)+".log")
}

// The harness's own events.
const (
	evExit       = "exit"        // the process ended
	evSetup      = "setup"       // the run's servers are up, after detail
	evBrokerKill = "broker-kill" // a broker node was crashed and restarted: detail says which and how long it took
)

func (r *run) record(ev event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	if ev.kind == evKill {
		if p := r.procs[ev.proc]; p != nil {
			p.selfKill = true
		}
	}
}

// dumpEvents writes every event to events.log in the run's directory.
func (r *run) dumpEvents() {
	f, err := os.Create(filepath.Join(r.h.dir, r.id, "events.log"))
	if err != nil {
		return
	}
	defer f.Close()
	evs := slices.Clone(r.evs)
	slices.SortStableFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
	for _, ev := range evs {
		fmt.Fprintf(f, "%s p%d %s %s %s\n", ev.at.Format("15:04:05.000000"), ev.proc, ev.kind, ev.key, ev.detail)
	}
}

// killRandom SIGKILLs one running consumer process.
func (r *run) killRandom() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.procs) == 0 {
		return
	}
	ns := make([]int, 0, len(r.procs))
	for n := range r.procs {
		ns = append(ns, n)
	}
	p := r.procs[ns[mrand.IntN(len(ns))]]
	p.cmd.Process.Kill()
	r.evs = append(r.evs, event{proc: p.n, at: time.Now(), kind: evKill, detail: "random"})
}

// stopAll stops every consumer with SIGTERM (SIGKILL after 20s) and waits
// for them; no process is started after.
func (r *run) stopAll() {
	r.mu.Lock()
	r.stopped = true
	ps := make([]*proc, 0, len(r.procs))
	for _, p := range r.procs {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	for _, p := range ps {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	r.procWG.Wait()
}

// awaitSettled waits until the broker holds nothing unacked, or ctx ends
// (false). A message is acked only once its outcome is stored, after its
// side effect, so nothing is in flight then and nothing will be delivered
// again; whether every key has its effect is for the report to say.
//
// Asking a broker can be dear (rabbitmqctl starts an Erlang VM), so until
// every key has an effect in the ledger, the broker is asked only every 2s:
// the ledger is complete first in a run that loses nothing.
func (r *run) awaitSettled(ctx context.Context) bool {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var asked time.Time
	for {
		r.mu.Lock()
		keys := len(r.keys)
		r.mu.Unlock()
		n, err := r.ledger.count(ctx)
		if err == nil && (n >= keys || time.Since(asked) > 2*time.Second) {
			asked = time.Now()
			var u int
			if u, err = r.b.unsettled(ctx); err == nil && u == 0 {
				return true
			}
		}
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(r.h.out, "  waiting: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// crashBroker crashes a node of the run's broker and starts it again (see
// crasher), and records it.
func (r *run) crashBroker(ctx context.Context) error {
	c, ok := r.b.(crasher)
	if !ok {
		return fmt.Errorf("the %s broker cannot be crashed by the harness", r.b.name())
	}
	at := time.Now()
	what, err := c.crash(ctx)
	if err != nil {
		return fmt.Errorf("crashing %s: %w", r.b.name(), err)
	}
	r.mu.Lock()
	r.brokerKills++
	r.evs = append(r.evs, event{at: at, kind: evBrokerKill, detail: what})
	r.mu.Unlock()
	return nil
}

// terminateBackends terminates every PostgreSQL backend of the run's
// consumers (by application_name), and only those.
func (r *run) terminateBackends(ctx context.Context) error {
	var n int
	err := r.h.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE application_name = $1`, r.spec.AppName).Scan(&n)
	if err != nil {
		return fmt.Errorf("pg_terminate_backend: %w", err)
	}
	r.mu.Lock()
	r.pgTerminated += n
	r.mu.Unlock()
	return nil
}

// restartRedis crashes the run's redis-server and starts it again, then
// finds which stored outcomes the crash lost: an outcome stored before the
// crash whose record is gone, or is another claim's, after it. An outcome
// already found lost at an earlier restart is not counted again.
func (r *run) restartRedis(ctx context.Context) error {
	if r.rs == nil {
		return nil
	}
	r.mu.Lock()
	stored := map[string]event{} // key → its last C before the crash
	for _, ev := range r.evs {
		if ev.kind == evOutcome {
			stored[ev.key] = ev
		}
	}
	for k, ev := range stored {
		if at, ok := r.lostAt[k]; ok && ev.at.Before(at) {
			delete(stored, k)
		}
	}
	r.mu.Unlock()
	crash := time.Now()
	if err := r.rs.restart(); err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: r.rs.addr()})
	defer c.Close()
	s, err := redisstore.New(c, redisstore.Config{Prefix: r.spec.RedisKeys})
	if err != nil {
		return err
	}
	res := restartResult{crash: crash, checked: len(stored)}
	for k, ev := range stored {
		rec, err := s.Get(ctx, storage.StoreKey(r.spec.Namespace, k))
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		if err != nil || strconv.FormatUint(uint64(rec.Token), 10) != ev.detail || rec.Status != storage.StatusCompleted {
			res.lost = append(res.lost, lostOutcome{key: k, at: ev.at})
		}
	}
	r.mu.Lock()
	r.restarts = append(r.restarts, res)
	for _, l := range res.lost {
		r.lostAt[l.key] = crash
	}
	r.mu.Unlock()
	return nil
}
