package idem

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// cache keeps recent outcomes (Completed or Failed only) in process memory,
// least recently used first out, in shards so that concurrent duplicates do
// not queue on one lock. An entry expires at its record's expiry or after
// the cache TTL, whichever comes first.
type cache struct {
	ttl    time.Duration
	seed   maphash.Seed
	shards []cacheShard
}

type cacheShard struct {
	max        int
	mu         sync.Mutex
	m          map[string]*centry
	head, tail *centry // most recently used first
}

type centry struct {
	key         string
	status      Status
	fingerprint []byte
	result      []byte
	expires     time.Time
	prev, next  *centry
}

// newCache returns a cache of size entries at most. A small cache has one
// shard, so its LRU order is exact; a large one splits it over 16.
func newCache(size int, ttl time.Duration) *cache {
	n := 1
	if size >= 1024 {
		n = 16
	}
	c := &cache{ttl: ttl, seed: maphash.MakeSeed(), shards: make([]cacheShard, n)}
	for i := range c.shards {
		c.shards[i] = cacheShard{max: size / n, m: make(map[string]*centry)}
	}
	return c
}

func (c *cache) shard(key string) *cacheShard {
	if len(c.shards) == 1 {
		return &c.shards[0]
	}
	return &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
}

// get returns a copy of the entry's status, fingerprint and result.
func (c *cache) get(key string, now time.Time) (status Status, fingerprint, result []byte, ok bool) {
	return c.shard(key).get(key, now)
}

func (c *cache) put(key string, status Status, fingerprint, result []byte, expires time.Time) {
	if limit := time.Now().Add(c.ttl); expires.After(limit) {
		expires = limit
	}
	c.shard(key).put(key, status, fingerprint, result, expires)
}

func (c *cacheShard) get(key string, now time.Time) (status Status, fingerprint, result []byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[key]
	if e == nil {
		return 0, nil, nil, false
	}
	if !now.Before(e.expires) {
		c.unlink(e)
		delete(c.m, key)
		return 0, nil, nil, false
	}
	c.unlink(e)
	c.pushFront(e)
	return e.status, e.fingerprint, bytes.Clone(e.result), true
}

func (c *cacheShard) put(key string, status Status, fingerprint, result []byte, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[key]; e != nil {
		c.unlink(e)
		delete(c.m, key)
	}
	for len(c.m) >= c.max && c.tail != nil {
		old := c.tail
		c.unlink(old)
		delete(c.m, old.key)
	}
	e := &centry{key: key, status: status, fingerprint: fingerprint, result: result, expires: expires}
	c.m[key] = e
	c.pushFront(e)
}

func (c *cacheShard) unlink(e *centry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (c *cacheShard) pushFront(e *centry) {
	e.next = c.head
	if c.head != nil {
		c.head.prev = e
	}
	c.head = e
	if c.tail == nil {
		c.tail = e
	}
}

// fromCache answers a duplicate from the local cache, when it has the key.
func (g *Guard) fromCache(ctx context.Context, scope, key string, a ClaimArgs) (Result, error, bool) {
	status, fp, result, ok := g.cache.get(a.Key, time.Now())
	if !ok {
		return Result{}, nil, false
	}
	g.observe(ctx, Event{Op: OpCacheHit, Scope: scope, Key: key})
	if !bytes.Equal(fp, a.Fingerprint) {
		return Result{}, fmt.Errorf("%w (key %q)", ErrKeyReused, key), true
	}
	res, err := Replay(Record{Status: status, Result: result})
	return res, err, true
}

// cacheRecord keeps a stored outcome in the local cache.
func (g *Guard) cacheRecord(r Record) {
	if g.cache != nil && r.Status.Done() {
		g.cache.put(r.Key, r.Status, r.Fingerprint, bytes.Clone(r.Result), r.ExpiresAt)
	}
}
