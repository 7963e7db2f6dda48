package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgstore"
)

// pgBinDir returns the directory of PostgreSQL's server programs: the
// newest under /usr/lib/postgresql (Debian's layout), or the one of
// pg_ctl on the PATH.
func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_basebackup")); err == nil {
			return d, nil
		}
	}
	p, err := exec.LookPath("pg_ctl")
	if err != nil {
		return "", fmt.Errorf("PostgreSQL's server programs (initdb, pg_basebackup, pg_ctl) are not installed: run scripts/services.sh")
	}
	return filepath.Dir(p), nil
}

// standbyPair is a PostgreSQL primary and a streaming standby of the
// harness's own, on free loopback ports, in a directory of their own. The
// standby streams the primary's WAL through a link that delays it.
// PostgreSQL refuses to run as root: as root, the harness runs them as the
// postgres user.
type standbyPair struct {
	bin   string
	dir   string
	cred  *syscall.Credential
	ports [2]int // primary, standby
	procs [2]*exec.Cmd
	link  *link
}

// startStandbyPair starts the pair; sync makes the standby synchronous
// (synchronous_standby_names, synchronous_commit = on).
func startStandbyPair(ctx context.Context, delay time.Duration, sync bool) (_ *standbyPair, err error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	p := &standbyPair{bin: bin}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.dir, err = os.MkdirTemp("", "idemfaults-pg-"); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL does not run as root and there is no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(p.dir, uid, gid); err != nil {
			return nil, err
		}
	}
	for i := range p.ports {
		if p.ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	primary, standby := filepath.Join(p.dir, "primary"), filepath.Join(p.dir, "standby")
	if err := p.exec("initdb", "-D", primary, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"); err != nil {
		return nil, err
	}
	args := []string{"-c", "wal_level=replica", "-c", "max_wal_senders=4"}
	if sync {
		args = append(args, "-c", "synchronous_standby_names=standby", "-c", "synchronous_commit=on")
	}
	if err := p.start(0, primary, args...); err != nil {
		return nil, err
	}
	if p.link, err = newLink(net127(p.ports[0]), delay); err != nil {
		return nil, err
	}
	if err := p.exec("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.ports[0]), "-U", "postgres",
		"-D", standby, "-X", "stream", "-R", "--no-sync"); err != nil {
		return nil, err
	}
	// The standby streams through the link (-R wrote the primary's own
	// address; the last setting wins).
	_, lport := splitPort(p.link.addr())
	conninfo := fmt.Sprintf("\nprimary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=standby'\n", lport)
	f, err := os.OpenFile(filepath.Join(standby, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(conninfo)
	f.Close()
	if err != nil {
		return nil, err
	}
	// The standby retries its stream every 200ms, not every 5s (the
	// default), so that a promotion right after the primary's death does
	// not wait out a retry: the run measures idem, not that interval.
	if err := p.start(1, standby, "-c", "wal_retrieve_retry_interval=200ms"); err != nil {
		return nil, err
	}
	want := "async"
	if sync {
		want = "sync"
	}
	db, err := pgx.Connect(ctx, p.url(0))
	if err != nil {
		return nil, err
	}
	defer db.Close(context.WithoutCancel(ctx))
	err = waitFor(ctx, 30*time.Second, func() error {
		var state string
		err := db.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby' AND state = 'streaming'`).Scan(&state)
		if err == nil && state != want {
			err = fmt.Errorf("the standby is %s, want %s", state, want)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("the standby does not stream: %w", err)
	}
	return p, nil
}

// exec runs one of PostgreSQL's programs to its end.
func (p *standbyPair) exec(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, out)
	}
	return nil
}

// start starts server i (0 the primary, 1 the standby) on its port with
// its data in data, and waits until it accepts connections.
func (p *standbyPair) start(i int, data string, args ...string) error {
	args = append([]string{"-D", data, "-p", strconv.Itoa(p.ports[i]), "-k", p.dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "shared_buffers=16MB", "-c", "max_connections=50"}, args...)
	log, err := os.Create(filepath.Join(p.dir, fmt.Sprintf("postgres-%d.log", i)))
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(p.bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	err = cmd.Start()
	log.Close()
	if err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	go cmd.Wait()
	p.procs[i] = cmd
	// pg_isready answers at once while the server is not listening yet.
	return waitFor(context.Background(), 30*time.Second, func() error {
		return p.exec("pg_isready", "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(p.ports[i]))
	})
}

// url is server i's URL; url(-1) names both, for a client that follows the
// one that accepts writes (libpq's and pgx's target_session_attrs).
func (p *standbyPair) url(i int) string {
	hosts := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", p.ports[0], p.ports[1])
	if i >= 0 {
		hosts = net127(p.ports[i])
	}
	return "postgres://postgres@" + hosts + "/postgres?sslmode=disable&connect_timeout=2&target_session_attrs=read-write"
}

// failover SIGKILLs the primary's every process at once, as a crash of
// its host would, calls dead once it refuses connections, and promotes the
// standby; it returns how long the promotion took.
func (p *standbyPair) failover(ctx context.Context, dead func()) (time.Duration, error) {
	stopCmd(p.procs[0])
	if err := awaitRefused(ctx, net127(p.ports[0])); err != nil {
		return 0, err
	}
	dead()
	at := time.Now()
	if err := p.exec("pg_ctl", "promote", "-w", "-t", "30", "-D", filepath.Join(p.dir, "standby")); err != nil {
		return 0, err
	}
	return time.Since(at), nil
}

func (p *standbyPair) close() {
	for _, c := range p.procs {
		stopCmd(c)
	}
	if p.link != nil {
		p.link.close()
	}
	if p.dir != "" && os.Getenv("IDEMFAULTS_KEEP") == "" {
		os.RemoveAll(p.dir)
	}
}

// standbyDeployment is failover's deployment over a standbyPair: the
// workers share a pool that connects to whichever server accepts writes.
type standbyDeployment struct {
	pair *standbyPair
	pool *pgxpool.Pool
	g    *idem.Guard
	txg  *pgstore.TxGuard
	l    ledger
}

func startStandbyDeployment(ctx context.Context, h *harness, cfg failoverConfig, _, schema string) (deployment, error) {
	pair, err := startStandbyPair(ctx, cfg.Delay, cfg.Sync)
	if err != nil {
		return nil, err
	}
	d := &standbyDeployment{pair: pair}
	if err := d.setup(ctx, h, cfg, schema); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *standbyDeployment) setup(ctx context.Context, h *harness, cfg failoverConfig, schema string) error {
	pcfg, err := pgxpool.ParseConfig(d.pair.url(-1))
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(cfg.Workers + 4)
	if d.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return err
	}
	if _, err := d.pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return err
	}
	records := schema + ".idem_records"
	if err := pgstore.Migrate(ctx, d.pool, records); err != nil {
		return err
	}
	gcfg := idem.Config{Namespace: "failover", Lease: cfg.Lease, StoreTimeout: 3 * time.Second}
	if cfg.Mode == modeTx {
		// The effects commit with the records, in the deployment's own
		// database: a failover that loses one loses both.
		d.l = newLedger(d.pool, schema)
		if err := d.l.create(ctx); err != nil {
			return err
		}
		gcfg.Lease = 0 // the transaction's row lock holds the key
		d.txg, err = pgstore.NewTxGuard(d.pool, gcfg, pgstore.TxConfig{Table: records})
		return err
	}
	if d.l, err = createLedger(ctx, h.db, schema); err != nil {
		return err
	}
	store, err := pgstore.New(d.pool, pgstore.Config{Table: records})
	if err != nil {
		return err
	}
	d.g, err = idem.New(store, gcfg)
	return err
}

func (d *standbyDeployment) do(ctx context.Context, key string, effect func(ctx context.Context, db execer) error) (idem.Result, error) {
	if d.txg != nil {
		return d.txg.Do(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			return []byte("done"), effect(ctx, tx)
		})
	}
	return d.g.Do(ctx, key, nil, func(ctx context.Context) ([]byte, error) {
		return []byte("done"), effect(ctx, d.l.db)
	})
}

func (d *standbyDeployment) ledger() ledger { return d.l }

func (d *standbyDeployment) failover(ctx context.Context, killing, dead func()) (string, error) {
	killing()
	took, err := d.pair.failover(ctx, dead)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("pg_ctl promote took %v", took.Round(10*time.Millisecond)), nil
}

func (d *standbyDeployment) close() {
	if d.g != nil {
		d.g.Close()
	}
	if d.pool != nil {
		d.pool.Close()
	}
	d.pair.close()
}
