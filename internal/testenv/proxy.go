package testenv

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from a loopback port of its own to a
// server, so that a test can cut every connection to a shared server (the
// machine's RabbitMQ, NATS or Kafka) without touching the server: Drop
// closes both sides of every live connection at once, as a network failure
// or a server's restart would, and clients reconnect through it.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to upstream (host:port) on a free loopback port.
func NewProxy(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// StartProxy is NewProxy for a test: it fails tb when the proxy cannot
// listen, and closes the proxy when tb ends.
func StartProxy(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	p, err := NewProxy(upstream)
	if err != nil {
		tb.Fatalf("proxy to %s: %v", upstream, err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream returns the host:port the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		pipe := func(dst, src net.Conn) {
			io.Copy(dst, src)
			// Either side ending ends both: a half-open connection would
			// keep a client waiting for replies that never come.
			p.untrack(c, up)
		}
		p.wg.Go(func() { pipe(up, c) })
		p.wg.Go(func() { pipe(c, up) })
	}
}

// track registers a connection pair; false once the proxy is closed.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

// Drop closes every live connection and returns how many client
// connections it cut.
func (p *Proxy) Drop() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	n := len(p.conns) / 2
	clear(p.conns)
	return n
}

// Close stops accepting, cuts every connection and waits for the
// forwarding goroutines. It is idempotent.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
