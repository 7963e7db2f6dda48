package memstore

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemgo/idem/storage"
)

// EntryOverhead is what a record counts against Config.MaxBytes besides
// its key, fingerprint and result: its map slot (the entry held by value,
// the key's string header, the map's own share) and its place in the
// eviction queues, rounded up.
const EntryOverhead = 192

// Eviction describes a record the store evicted to make room (see
// [Store]).
type Eviction struct {
	Key    string         // the store key
	Status storage.Status // Completed, Failed, or InProgress for a released record
	Bytes  int            // what it counted against Config.MaxBytes
}

// entrySize is what the key's entry e counts against Config.MaxBytes.
func entrySize(key string, e *entry) int64 {
	return int64(EntryOverhead + len(key) + len(e.fpLong) + len(e.result))
}

// noRoom is the error of a transition that needs n more records of b more
// bytes than the caps leave. It never leaves the package: the call makes
// room, with no lock held, and tries again, or returns ErrFull.
type noRoom struct{ n, b int64 }

func (e *noRoom) Error() string { return "memstore: no room" }

// reserve counts n more records of b more bytes, or returns a *noRoom
// when they do not fit.
func (s *store) reserve(n, b int64) error {
	for {
		count, size := s.count.Load(), s.bytes.Load()
		if count+n > int64(s.cfg.MaxEntries) || size+b > int64(s.cfg.MaxBytes) {
			return &noRoom{n, b}
		}
		if !s.count.CompareAndSwap(count, count+n) {
			continue
		}
		if s.bytes.CompareAndSwap(size, size+b) {
			return nil
		}
		s.count.Add(-n) // the bytes moved: count again
	}
}

func (s *store) fits(n, b int64) bool {
	return s.count.Load()+n <= int64(s.cfg.MaxEntries) && s.bytes.Load()+b <= int64(s.cfg.MaxBytes)
}

// makeRoomFor handles err, the error of a transition made under its
// shard's lock: for a *noRoom it makes the room asked for and reports that
// the transition is to run again, or returns ErrFull when nothing can go.
// Any other error, or nil, is the transition's answer.
func (s *store) makeRoomFor(err error) (again bool, _ error) {
	need, ok := errors.AsType[*noRoom](err)
	if !ok {
		return false, err
	}
	if s.makeRoom(need.n, need.b) {
		return true, nil
	}
	return false, fmt.Errorf("%w: %d records of %d bytes (Config.MaxEntries %d, Config.MaxBytes %d), none finished or released",
		ErrFull, s.count.Load(), s.bytes.Load(), s.cfg.MaxEntries, s.cfg.MaxBytes)
}

// makeRoom evicts records until n more of b more bytes fit, released ones
// first, then the oldest finished, and reports whether they did fit. It
// takes the shards' locks one at a time: the caller holds none. The room
// is not reserved: a concurrent caller may take it before the caller's
// transition runs again, which then asks for room again. So it answers
// false only when nothing could go, never because another took the room
// it made: each false is a refusal the caps leave no way around.
func (s *store) makeRoom(n, b int64) bool {
	var evicted []Eviction
	defer func() { s.report(evicted) }()
	swept := false
	for !s.fits(n, b) {
		sh, ok := s.oldestVictim()
		if !ok {
			// Nothing left to evict. Expired records that no queue holds
			// (claims nobody finished) still count until swept: sweep once,
			// at most once a second, before giving up.
			if swept || !s.mayFullSweep() {
				return s.fits(n, b)
			}
			s.sweep()
			swept = true
			continue
		}
		if ev, ok := s.evict(sh); ok {
			evicted = append(evicted, ev)
		}
	}
	return true
}

// The kinds of victims, in the order they are evicted: a shard keeps a
// queue of each.
const (
	released = iota // released, under no attempt cap: nothing to lose
	capped          // released under an attempt cap: its count resets
	finished        // Completed or Failed: its outcome is forgotten
	kinds
)

// oldestVictim returns the shard whose queues hold the next record to
// evict: of the records queued first in each shard, the one released
// first, else the one released under a cap first, else the one finished
// first.
func (s *store) oldestVictim() (*shard, bool) {
	var best [kinds]*shard
	var seq [kinds]uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k := range kinds {
			if v, ok := sh.victims[k].peek(); ok && (best[k] == nil || v.seq < seq[k]) {
				best[k], seq[k] = sh, v.seq
			}
		}
		sh.mu.Unlock()
	}
	for _, sh := range best {
		if sh != nil {
			return sh, true
		}
	}
	return nil, false
}

// evict takes the next victim of sh off its queues and removes its record
// if it still is what it was queued for, and returns it; a record that
// expired meanwhile is removed unreported.
func (s *store) evict(sh *shard) (Eviction, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var v victim
	kind, ok := 0, false
	for kind = range kinds {
		if v, ok = sh.victims[kind].pop(); ok {
			break
		}
	}
	if !ok {
		return Eviction{}, false // another call took it
	}
	e, ok := sh.m[v.key]
	if !ok {
		return Eviction{}, false
	}
	if e.expires <= s.cfg.Now().UnixNano() {
		s.remove(sh, v.key, &e)
		return Eviction{}, false
	}
	if !v.is(&e, kind) {
		return Eviction{}, false
	}
	s.remove(sh, v.key, &e)
	return Eviction{Key: v.key, Status: e.status, Bytes: int(entrySize(v.key, &e))}, true
}

// mayFullSweep reports whether makeRoom may sweep the whole store now: at
// most once a second.
func (s *store) mayFullSweep() bool {
	now := s.cfg.Now().UnixNano()
	last := s.fullSweep.Load()
	return (last == 0 || now-last >= int64(time.Second)) && s.fullSweep.CompareAndSwap(last, now)
}

// victim is a record queued for eviction in its shard: a released one
// (under an attempt cap or not), or a finished one with the expiry its
// outcome set. seq, from a store-wide counter, orders the victims of all
// shards.
type victim struct {
	key     string
	seq     uint64
	expires int64 // finished records only
}

// is reports whether e is still the record v was queued for as a victim of
// kind: released (under a cap for capped), or finished with the same
// expiry.
func (v victim) is(e *entry, kind int) bool {
	if kind == finished {
		return e.status.Done() && e.expires == v.expires
	}
	return e.status == storage.StatusInProgress && e.token == 0 && e.capped == (kind == capped)
}

// queueReleased queues the key's record e, released, in its shard sh,
// which is locked.
func (s *store) queueReleased(sh *shard, key string, e *entry) {
	kind := released
	if e.capped {
		kind = capped
	}
	sh.victims[kind].push(victim{key: key, seq: s.queued.Add(1)})
}

// queueFinished queues the key's record, finished with the expiry expires,
// in its shard sh, which is locked.
func (s *store) queueFinished(sh *shard, key string, expires int64) {
	sh.victims[finished].push(victim{key: key, seq: s.queued.Add(1), expires: expires})
}

// compactVictims drops the queued victims whose record is gone or
// changed, so that the queues hold about one victim per evictable record.
// The shard is locked.
func (sh *shard) compactVictims(now int64) {
	for kind := range kinds {
		q := &sh.victims[kind]
		vs := q.vs[q.head:]
		kept := vs[:0]
		for _, v := range vs {
			if e, ok := sh.m[v.key]; ok && e.expires > now && v.is(&e, kind) {
				kept = append(kept, v)
			}
		}
		clear(vs[len(kept):])
		q.vs, q.head = kept, 0
	}
}

// fifo is a queue of victims.
type fifo struct {
	vs   []victim
	head int
}

func (q *fifo) push(v victim) { q.vs = append(q.vs, v) }

func (q *fifo) len() int { return len(q.vs) - q.head }

func (q *fifo) peek() (victim, bool) {
	if q.head == len(q.vs) {
		return victim{}, false
	}
	return q.vs[q.head], true
}

func (q *fifo) pop() (victim, bool) {
	v, ok := q.peek()
	if !ok {
		q.vs, q.head = q.vs[:0], 0
		return victim{}, false
	}
	q.vs[q.head] = victim{}
	q.head++
	if q.head >= 1024 && q.head*2 >= len(q.vs) { // reuse the front
		n := copy(q.vs, q.vs[q.head:])
		clear(q.vs[n:])
		q.vs, q.head = q.vs[:n], 0
	}
	return v, true
}

// evictionLog rate-limits the warnings about evictions.
type evictionLog struct {
	mu      sync.Mutex
	last    int64 // when the last line was logged, store-clock ns; 0: never
	records int   // evicted since
	bytes   int
}

// evictionLogInterval is the least time between two eviction warnings.
const evictionLogInterval = time.Minute

// report passes evicted to Config.OnEvict and counts them for the log.
func (s *store) report(evicted []Eviction) {
	if len(evicted) == 0 {
		return
	}
	if s.cfg.OnEvict != nil {
		for _, ev := range evicted {
			s.cfg.OnEvict(ev)
		}
	}
	l := &s.evicted
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range evicted {
		l.records++
		l.bytes += ev.Bytes
	}
	now := s.cfg.Now().UnixNano()
	if l.last != 0 && now-l.last < int64(evictionLogInterval) {
		return
	}
	s.cfg.Logger.Warn("memstore: full: evicted records to make room; a duplicate of an evicted key runs its operation again",
		slog.Int("evicted", l.records), slog.Int("bytes", l.bytes),
		slog.Int("max_entries", s.cfg.MaxEntries), slog.Int("max_bytes", s.cfg.MaxBytes))
	l.last, l.records, l.bytes = now, 0, 0
}
