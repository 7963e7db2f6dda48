package main

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
)

// proxy forwards TCP connections from a loopback port of its own to a
// server, so that the harness can cut every connection to a shared server
// (the machine's RabbitMQ or NATS, a Kafka broker) without touching the
// server: drop
// closes both sides of every live connection at once, as a network
// failure or a server's restart would, and clients reconnect through it.
type proxy struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(upstream string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// addr is the proxy's host:port.
func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
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
func (p *proxy) track(cs ...net.Conn) bool {
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

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

// urlHost returns the host:port of a server's URL, for a proxy to it.
func urlHost(s string) ([]string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	return []string{u.Host}, nil
}

// drop closes every live connection and returns how many client
// connections it cut.
func (p *proxy) drop() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	n := len(p.conns) / 2
	clear(p.conns)
	return n
}

// close stops accepting, cuts every connection and waits for the
// forwarding goroutines. It is idempotent.
func (p *proxy) close() error {
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
