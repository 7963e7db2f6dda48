package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
)

// sentinelMaster is the name the run's Sentinels monitor the primary by.
const sentinelMaster = "idemfaults"

// sentinelSet is a replicated Redis of the harness's own: a primary, two
// replicas and three Sentinels, each a process of its own on a free
// loopback port, with its files in dir. Each replica replicates through a
// link of its own that delays the stream by the configured delay, so that
// a replica is behind when the primary dies. Sentinel sees the replicas at
// their own addresses, and repoints them at a promoted primary directly:
// after a failover, replication is not delayed.
type sentinelSet struct {
	dir       string
	servers   []*exec.Cmd // primary, replica, replica
	ports     []int
	sentinels []*exec.Cmd
	sports    []int
	links     []*link
}

// startSentinelSet starts the set; minReplicas is the servers'
// min-replicas-to-write (0 for none). The caller closes it.
func startSentinelSet(ctx context.Context, dir string, delay time.Duration, minReplicas int) (_ *sentinelSet, err error) {
	s := &sentinelSet{dir: dir}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for i := range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--protected-mode", "no", "--loglevel", "notice", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
		if minReplicas > 0 {
			args = append(args, "--min-replicas-to-write", strconv.Itoa(minReplicas), "--min-replicas-max-lag", "10")
		}
		if i > 0 {
			l, err := newLink(net127(s.ports[0]), delay)
			if err != nil {
				return nil, err
			}
			s.links = append(s.links, l)
			_, lport := splitPort(l.addr())
			args = append(args, "--replicaof", "127.0.0.1", strconv.Itoa(lport))
		}
		cmd, err := startServer(filepath.Join(dir, fmt.Sprintf("redis-%d", i)), "redis-server", args...)
		if err != nil {
			return nil, err
		}
		s.servers, s.ports = append(s.servers, cmd), append(s.ports, port)
		if err := awaitPing(ctx, net127(port)); err != nil {
			return nil, err
		}
	}
	for i := range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		sdir := filepath.Join(dir, fmt.Sprintf("sentinel-%d", i))
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return nil, err
		}
		conf := filepath.Join(sdir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
			"sentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %[3]s 1000\n"+
			// Longer than a run: Sentinel would otherwise repoint a replica
			// that replicates through its link at the primary's own address.
			"sentinel failover-timeout %[3]s 120000\n"+
			"sentinel parallel-syncs %[3]s 2\n", port, sdir, sentinelMaster, s.ports[0])
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return nil, err
		}
		cmd, err := startServer(sdir, "redis-server", conf, "--sentinel")
		if err != nil {
			return nil, err
		}
		s.sentinels, s.sports = append(s.sentinels, cmd), append(s.sports, port)
	}
	// Ready once every Sentinel knows both replicas and the other two
	// Sentinels (they find each other through the primary, every 2s).
	for _, port := range s.sports {
		sc := redis.NewSentinelClient(&redis.Options{Addr: net127(port)})
		err := waitFor(ctx, 30*time.Second, func() error {
			reps, err := sc.Replicas(ctx, sentinelMaster).Result()
			if err != nil {
				return err
			}
			sens, err := sc.Sentinels(ctx, sentinelMaster).Result()
			if err != nil {
				return err
			}
			if len(reps) != 2 || len(sens) != 2 {
				return fmt.Errorf("Sentinel on %d knows %d replicas and %d Sentinels", port, len(reps), len(sens))
			}
			return nil
		})
		sc.Close()
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// sentinelAddrs are the Sentinels' host:ports.
func (s *sentinelSet) sentinelAddrs() []string {
	var out []string
	for _, p := range s.sports {
		out = append(out, net127(p))
	}
	return out
}

// killPrimary SIGKILLs the first primary. It is not started again: the
// failover is what the run measures.
func (s *sentinelSet) killPrimary() {
	s.servers[0].Process.Kill()
}

// primaryAddr asks a Sentinel which server is the primary now.
func (s *sentinelSet) primaryAddr(ctx context.Context) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: net127(s.sports[0])})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, sentinelMaster).Result()
	if err != nil {
		return "", err
	}
	return a[0] + ":" + a[1], nil
}

func (s *sentinelSet) close() {
	for _, c := range append(append([]*exec.Cmd{}, s.sentinels...), s.servers...) {
		stopCmd(c)
	}
	for _, l := range s.links {
		l.close()
	}
}

// startServer starts name with args in dir, its output in dir/log, killed
// with the harness. Its process group is its own, so that stopCmd kills
// what it forked too.
func startServer(dir, name string, args ...string) (*exec.Cmd, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	err = cmd.Start()
	log.Close()
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go cmd.Wait()
	return cmd, nil
}

// stopCmd SIGKILLs c's process group.
func stopCmd(c *exec.Cmd) {
	if c != nil && c.Process != nil {
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
}

func awaitPing(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	return waitFor(ctx, 20*time.Second, func() error { return c.Ping(ctx).Err() })
}

// waitFor calls f every 50ms until it succeeds, d passes or ctx ends.
func waitFor(parent context.Context, d time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(parent, d)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return parent.Err()
			}
			return fmt.Errorf("not ready within %v: %w", d, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func net127(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func splitPort(addr string) (string, int) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			p, _ := strconv.Atoi(addr[i+1:])
			return addr[:i], p
		}
	}
	return addr, 0
}

// sentinelDeployment is failover's deployment over a sentinelSet: every
// worker's Guard shares one go-redis failover client, which asks the
// Sentinels for the primary and follows a promotion.
type sentinelDeployment struct {
	set    *sentinelSet
	client *redis.Client
	g      *idem.Guard
	l      ledger
}

func startSentinelDeployment(ctx context.Context, h *harness, cfg failoverConfig, dir, schema string) (deployment, error) {
	if cfg.Mode == modeTx {
		return nil, fmt.Errorf("%s: redisstore has no transactional mode", cfg.Name)
	}
	l, err := createLedger(ctx, h.db, schema)
	if err != nil {
		return nil, err
	}
	set, err := startSentinelSet(ctx, dir, cfg.Delay, cfg.MinReplicas)
	if err != nil {
		return nil, err
	}
	d := &sentinelDeployment{set: set, l: l}
	d.client = redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: sentinelMaster, SentinelAddrs: set.sentinelAddrs(),
		PoolSize: cfg.Workers + 4, DialTimeout: 500 * time.Millisecond,
		ReadTimeout: 2 * time.Second, WriteTimeout: time.Second, MaxRetries: 1,
	})
	store, err := redisstore.New(d.client, redisstore.Config{Prefix: "idemfaults:" + schema + ":", WaitReplicas: cfg.WaitReplicas})
	if err == nil {
		d.g, err = idem.New(store, idem.Config{Namespace: "failover", Lease: cfg.Lease, StoreTimeout: 3 * time.Second})
	}
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *sentinelDeployment) do(ctx context.Context, key string, effect func(ctx context.Context, db execer) error) (idem.Result, error) {
	return d.g.Do(ctx, key, nil, func(ctx context.Context) ([]byte, error) {
		return []byte("done"), effect(ctx, d.l.db)
	})
}

func (d *sentinelDeployment) ledger() ledger { return d.l }

// failover SIGKILLs the primary; Sentinel promotes a replica on its own.
func (d *sentinelDeployment) failover(ctx context.Context, killing, dead func()) (string, error) {
	old, err := d.set.primaryAddr(ctx)
	if err != nil {
		return "", err
	}
	killing()
	at := time.Now()
	d.set.killPrimary()
	if err := awaitRefused(ctx, net127(d.set.ports[0])); err != nil {
		return "", err
	}
	dead()
	var now string
	err = waitFor(ctx, 60*time.Second, func() error {
		if now, err = d.set.primaryAddr(ctx); err == nil && now == old {
			err = errors.New("not yet")
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("Sentinel promoted no replica: %w", err)
	}
	return fmt.Sprintf("Sentinel promoted %s %v after the kill", now, time.Since(at).Round(10*time.Millisecond)), nil
}

func (d *sentinelDeployment) close() {
	if d.g != nil {
		d.g.Close()
	}
	if d.client != nil {
		d.client.Close()
	}
	d.set.close()
}

// quietRedis drops go-redis's own log lines (a dial refused by the dead
// primary, each Sentinel's news): the run counts what they say.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietRedis{}) }

// awaitRefused returns once nothing accepts connections at addr: a killed
// server is gone.
func awaitRefused(ctx context.Context, addr string) error {
	return waitFor(ctx, 10*time.Second, func() error {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return nil
		}
		c.Close()
		return fmt.Errorf("%s still accepts connections", addr)
	})
}
