package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server process of the harness's own, on a free
// loopback port, with its data directory in the run's directory. crash
// kills it with SIGKILL and start brings it back on the same port with the
// same files, so a restart loses exactly what its persistence settings
// lose: everything without appendonly (snapshots are off too), about a
// second with appendfsync everysec, nothing with appendfsync always.
type redisServer struct {
	port  int
	dir   string
	fsync string // "" (appendonly no), "everysec" or "always"
	cmd   *exec.Cmd
	log   *os.File
}

func newRedisServer(dir, fsync string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &redisServer{port: port, dir: dir, fsync: fsync}
	return r, r.start()
}

func (r *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

func (r *redisServer) start() error {
	args := []string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"}
	if r.fsync == "" {
		args = append(args, "--appendonly", "no")
	} else {
		args = append(args, "--appendonly", "yes", "--appendfsync", r.fsync)
	}
	log, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting redis-server: %w", err)
	}
	r.cmd, r.log = cmd, log
	// Ready once it answers PING (it loads its append-only file first).
	c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			r.crash()
			return fmt.Errorf("redis-server on %s did not answer within 20s: %w", r.addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// crash kills the server with SIGKILL: no shutdown, no final save.
func (r *redisServer) crash() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.log.Close()
	r.cmd = nil
}

// restart crashes the server and starts it again on the same port.
func (r *redisServer) restart() error {
	r.crash()
	return r.start()
}

// freePort returns a loopback TCP port nobody listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
