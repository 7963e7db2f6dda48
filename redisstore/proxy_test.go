package redisstore_test

import (
	"io"
	"net"
	"sync"
	"testing"
)

// proxy forwards loopback connections to a Redis server through relays
// the test chooses, to stand in for a network or a server that misbehaves:
// for each connection up copies from the client to the server and down
// from the server to the client, each on a goroutine the proxy waits for
// when it closes.
type proxy struct {
	l        net.Listener
	target   string
	up, down func(dst, src net.Conn)
	done     chan struct{} // closed when the proxy closes
	once     sync.Once
	mu       sync.Mutex
	conns    []net.Conn
	closed   bool
	wg       sync.WaitGroup
}

// startProxy starts a proxy to target, closed when t ends (or before, by
// its close).
func startProxy(t testing.TB, target string, up, down func(dst, src net.Conn)) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target, up: up, down: down, done: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) accept() {
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Go(func() { p.up(server, client) })
		p.wg.Go(func() { p.down(client, server) })
	}
}

// close closes every connection and waits for the relays. It is
// idempotent.
func (p *proxy) close() {
	p.once.Do(func() {
		close(p.done)
		p.l.Close()
		p.mu.Lock()
		p.closed = true
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	p.wg.Wait()
}

// relay copies src to dst until src ends, then closes dst.
func relay(dst, src net.Conn) {
	io.Copy(dst, src)
	dst.Close()
}
