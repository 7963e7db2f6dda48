package idemtest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// RunStoredValueOverLimit checks that a store refuses to read a stored
// value longer than its value limit, instead of replaying it: reader and
// writer share their records (one Redis prefix, one table), and the
// writer's MaxValueSize is larger than the reader's. The writer stores a
// Completed and a Failed record whose value is longer than the reader's
// limit; the reader's Claim, Get and (when it has one) ClaimBatch of each
// must fail with an error wrapping idem.ErrValueTooLarge that passes
// isTooLarge(err, key, size), the store's own check of its typed error;
// the writer still reads both whole.
func RunStoredValueOverLimit(t *testing.T, writer, reader storage.Store, isTooLarge func(err error, key string, size int) bool) {
	t.Helper()
	w, r := writer, reader
	if r.MaxValueSize() <= 0 || w.MaxValueSize() > 0 && w.MaxValueSize() <= r.MaxValueSize() {
		t.Fatalf("RunStoredValueOverLimit needs stores with MaxValueSize, the writer's larger than the reader's")
	}
	e := newEnv(t, writer)
	size := 4*r.MaxValueSize() + 1
	if wl := w.MaxValueSize(); wl > 0 {
		size = min(size, wl)
	}
	value := bytes.Repeat([]byte("v"), size)
	for _, o := range outcomes {
		k := o.key
		a, _ := e.finish(k, o.fail, value)
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, idem.ErrValueTooLarge) || !isTooLarge(err, a.Key, size) {
				t.Errorf("%s: %s of a record holding %d bytes, over the reader's MaxValueSize %d: %v, want its refusal",
					k, op, size, r.MaxValueSize(), err)
			}
		}
		_, err := reader.Claim(ctx(t), a)
		check("Claim", err)
		_, err = reader.Get(ctx(t), a.Key)
		check("Get", err)
		{
			other := e.args(k+" other", "fp")
			got, err := reader.ClaimBatch(ctx(t), []storage.ClaimArgs{a, other})
			if err != nil || len(got) != 2 || got[1].Outcome != storage.Acquired {
				t.Fatalf("%s: ClaimBatch: %v %+v, want the other entry Acquired", k, err, got)
			}
			check("ClaimBatch", got[0].Err)
		}
		if d := e.mustClaim(a, storage.Duplicate); !bytes.Equal(d.Record.Result, value) {
			t.Errorf("%s: the writer read %d bytes back, want its %d", k, len(d.Record.Result), size)
		}
	}
}
