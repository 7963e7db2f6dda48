package consume_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka/internal/consume"
	"github.com/idemgo/idem/internal/adapter"
)

func TestDecideKey(t *testing.T) {
	for _, tc := range []struct {
		err     error
		unkeyed bool
		guarded bool
		want    adapter.Verdict
	}{
		{consume.ErrNoKey, false, true, adapter.DeadLetter},
		{consume.ErrNoKey, true, false, 0},
		{fmt.Errorf("%w: bad json", consume.ErrBadKey), true, true, adapter.DeadLetter},
	} {
		a, guarded := consume.DecideKey(tc.err, tc.unkeyed)
		if guarded != tc.guarded || a.Verdict != tc.want {
			t.Fatalf("DecideKey(%v, %v) = %v, %v; want %v, %v", tc.err, tc.unkeyed, a.Verdict, guarded, tc.want, tc.guarded)
		}
		if guarded && (!errors.Is(a.Cause, tc.err) || !errors.Is(a.Cause, idem.ErrInvalidKey)) {
			t.Fatalf("DecideKey(%v): cause %v, want it wrapping the key's error and idem.ErrInvalidKey", tc.err, a.Cause)
		}
	}
}
