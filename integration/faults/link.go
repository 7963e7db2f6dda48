package main

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// link is a TCP proxy the harness puts between two of its own processes to
// stand for the network between two hosts: it forwards every byte after a
// delay (a slow replication link, so that a replica is behind its primary
// when the primary dies), and it can cut the link (a partition).
//
// A cut is a blackhole, not a close: the link keeps every connection open,
// accepts new ones, and forwards nothing until it is healed, so the client
// sees what a real partition gives it, replies that never come, and gives
// up only on its own timeouts. The bytes sent meanwhile are held and
// delivered once the link is healed, as TCP's retransmission delivers a
// partitioned connection's segments if it is still open then; a client that
// gave up has closed its connection by then, and the server's side of a
// held connection closes with it.
//
// A proxy, rather than tc netem on a veth pair in a network namespace,
// because it needs no root and no kernel support, so the suite runs the
// same on a laptop, in a container and in CI, and because it delays and
// cuts exactly one link (one replica's stream from its primary, one
// worker's connections to its store) while every other connection between
// the same processes stays fast. What it cannot show is what the kernel
// does to a connection partitioned for longer than its retransmission
// timeout (the connection resets): a partition here lasts seconds, far
// below that.
type link struct {
	ln       net.Listener
	upstream string
	delay    time.Duration // each byte is forwarded this long after it was read

	mu     sync.Mutex
	cut    bool
	healed chan struct{} // closed when a cut ends
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// newLink starts a link to upstream on a free loopback port, forwarding
// each way after delay.
func newLink(upstream string, delay time.Duration) (*link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &link{ln: ln, upstream: upstream, delay: delay, healed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(l.healed)
	l.wg.Go(l.accept)
	return l, nil
}

func (l *link) addr() string { return l.ln.Addr().String() }

func (l *link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.wg.Go(func() {
			// A connection made while the link is cut reaches nobody
			// until it is healed: the client's SYN is answered (the
			// proxy listens), its data is not.
			l.await()
			up, err := net.Dial("tcp", l.upstream)
			if err != nil {
				c.Close()
				return
			}
			if !l.track(c, up) {
				return
			}
			var pair sync.WaitGroup
			pair.Go(func() { l.pipe(up, c) })
			pair.Go(func() { l.pipe(c, up) })
			pair.Wait()
			l.untrack(c, up)
		})
	}
}

// await returns once the link is not cut, or closed.
func (l *link) await() {
	l.mu.Lock()
	h := l.healed
	l.mu.Unlock()
	<-h
}

type chunk struct {
	b  []byte
	at time.Time
}

// pipe forwards src to dst, each chunk delay after it was read and never
// while the link is cut. Either side ending ends both, and drops what the
// link still holds: the bytes a crashed host had not put on the wire yet
// die with it.
func (l *link) pipe(dst, src net.Conn) {
	ch := make(chan chunk, 4096)
	done := make(chan struct{})
	var ended atomic.Bool
	go func() {
		defer close(done)
		for c := range ch {
			if d := time.Until(c.at.Add(l.delay)); d > 0 {
				time.Sleep(d)
			}
			l.await()
			if ended.Load() {
				continue
			}
			if _, err := dst.Write(c.b); err != nil {
				dst.Close()
				src.Close()
				for range ch {
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now()}
		}
		if err != nil {
			break
		}
	}
	ended.Store(true)
	close(ch)
	<-done
	dst.Close()
	src.Close()
}

func (l *link) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		l.conns[c] = struct{}{}
	}
	return true
}

func (l *link) untrack(cs ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(l.conns, c)
	}
}

// partition cuts the link: nothing is forwarded until heal.
func (l *link) partition() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.cut {
		l.cut, l.healed = true, make(chan struct{})
	}
}

// heal ends a cut: what was held is forwarded.
func (l *link) heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		l.cut = false
		close(l.healed)
	}
}

// close stops the link, closes every connection and waits for its
// goroutines.
func (l *link) close() error {
	err := l.ln.Close()
	l.heal()
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
