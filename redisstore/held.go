package redisstore

import (
	"sync"

	"github.com/idemgo/idem/storage"
)

// held remembers the InProgress record that each claim of ClaimBatch
// created, by its token, until CompleteBatch completes it: CompleteBatch
// then sends the whole record it expects and the whole record to write,
// and its script compares and sets them as they are (see
// completeBatchScript), rather than building the new record in Lua from
// the one it reads: the script then compares and writes bytes with
// PSETEX, and decodes and encodes no record, on the path every new key of
// a batch takes. An InProgress record's value never changes while its
// claim holds the key (Extend moves the expiry only), and it holds the
// claim's token, which no other claim has: the value is the same as the
// one sent exactly while the claim is current.
//
// It is bounded: two generations of at most heldGeneration records and
// heldGenerationBytes bytes of records each (a record is as long as its
// fingerprint, up to 64 KiB, so a bound in count alone let it reach about
// 2 GiB). When the current one is full it becomes the old one and the old
// one is dropped, so a record never completed (a claim released, failed, lost or
// completed by Complete) leaves within two generations. A record it no
// longer has is completed the way it was before, by its token: the
// answer is the same, only the server's work is not.
type held struct {
	mu       sync.Mutex
	cur, old map[storage.Token][]byte
	curBytes int // the length of cur's records
}

// heldGeneration is the most records one generation of held keeps: two of
// them, at about a hundred bytes a record with the map's own, are a few
// MiB at most, and more claims in flight than that between a ClaimBatch
// and its CompleteBatch is beyond any consumer's prefetch.
const heldGeneration = 1 << 14

// heldGenerationBytes bounds the records one generation of held keeps, in
// bytes: a generation of records with the common fingerprints (a hash,
// tens of bytes) reaches heldGeneration first, while long fingerprints
// fill it by size, 8 MiB a generation at most.
const heldGenerationBytes = 8 << 20

// put remembers, for each i of at, vs[i], the record that the claim with
// token ts[i] created.
func (h *held) put(ts []storage.Token, vs [][]byte, at []int) {
	if len(at) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, i := range at {
		if h.cur == nil || len(h.cur) >= heldGeneration || h.curBytes+len(vs[i]) > heldGenerationBytes {
			h.old, h.cur = h.cur, make(map[storage.Token][]byte, min(2*len(h.cur)+len(at), heldGeneration))
			h.curBytes = 0
		}
		h.cur[ts[i]] = vs[i]
		h.curBytes += len(vs[i])
	}
}

// take returns, and forgets, the record of each token of cs, nil where
// it has none.
func (h *held) take(cs []storage.Completion) [][]byte {
	vs := make([][]byte, len(cs))
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, c := range cs {
		if v, ok := h.cur[c.Token]; ok {
			vs[i] = v
			delete(h.cur, c.Token)
			h.curBytes -= len(v)
		} else if v, ok := h.old[c.Token]; ok {
			vs[i] = v
			delete(h.old, c.Token)
		}
	}
	return vs
}
