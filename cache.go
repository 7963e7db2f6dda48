package idem

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/idemgo/idem/storage"
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
	status      storage.Status
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

// get returns the entry of key, if it has one that has not expired at now:
// its status, whether fingerprint is the entry's, and a copy of its result
// (nil when the fingerprint differs). It keeps neither slice, so a caller
// may look up a key it has on its stack.
func (c *cache) get(key, fingerprint []byte, now time.Time) (status storage.Status, same bool, result []byte, ok bool) {
	sh := &c.shards[0]
	if len(c.shards) > 1 {
		// maphash.Bytes and maphash.String agree on the same bytes: put
		// finds the same shard.
		sh = &c.shards[maphash.Bytes(c.seed, key)%uint64(len(c.shards))]
	}
	return sh.get(key, fingerprint, now)
}

func (c *cache) put(key string, status storage.Status, fingerprint, result []byte, expires time.Time) {
	if limit := time.Now().Add(c.ttl); expires.After(limit) {
		expires = limit
	}
	sh := &c.shards[0]
	if len(c.shards) > 1 {
		sh = &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
	}
	sh.put(key, status, fingerprint, result, expires)
}

func (c *cacheShard) get(key, fingerprint []byte, now time.Time) (status storage.Status, same bool, result []byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[string(key)] // no conversion: the compiler looks the bytes up
	if e == nil {
		return 0, false, nil, false
	}
	if !now.Before(e.expires) {
		c.unlink(e)
		delete(c.m, e.key)
		return 0, false, nil, false
	}
	c.unlink(e)
	c.pushFront(e)
	if !bytes.Equal(e.fingerprint, fingerprint) {
		return e.status, false, nil, true
	}
	return e.status, true, bytes.Clone(e.result), true
}

func (c *cacheShard) put(key string, status storage.Status, fingerprint, result []byte, expires time.Time) {
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

// fromCache answers a duplicate from the local cache, when it has storeKey
// (the store key of key in scope) with an outcome that has not expired at
// now. It keeps neither storeKey nor fingerprint.
func (g *Guard) fromCache(ctx context.Context, scope, key string, storeKey, fingerprint []byte, now time.Time) (Result, error, bool) {
	status, same, result, ok := g.cache.get(storeKey, fingerprint, now)
	if !ok {
		return Result{}, nil, false
	}
	if !same {
		g.observe(ctx, Event{Op: OpCacheHit, Scope: scope, Key: key, Err: ErrKeyReused})
		return Result{}, fmt.Errorf("%w (key %q)", ErrKeyReused, key), true
	}
	g.observe(ctx, Event{Op: OpCacheHit, Scope: scope, Key: key})
	res, err := replay(storage.Record{Status: status, Result: result})
	return res, err, true
}

// cacheRecord keeps a stored outcome in the local cache, under key and
// fingerprint, the Guard's own: a store's record may share them with its
// claim's arguments.
func (g *Guard) cacheRecord(key string, fingerprint []byte, r storage.Record) {
	if g.cache != nil && r.Status.Done() {
		g.cache.put(key, r.Status, fingerprint, bytes.Clone(r.Result), r.ExpiresAt)
	}
}
