package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem"
)

func TestScopesSeparateKeys(t *testing.T) {
	g := newGuard(t, newMem(t), idem.Config{})
	ctx := context.Background()
	run := func(scope, key, value string) idem.Result {
		t.Helper()
		res, err := g.DoScoped(ctx, scope, key, nil, func(context.Context) ([]byte, error) { return []byte(value), nil })
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Alice's key, sent again by Bob: Bob's operation runs, and he never sees Alice's value.
	if res := run("alice", "k", "alice's"); res.Replayed {
		t.Fatal("first call replayed")
	}
	if res := run("bob", "k", "bob's"); res.Replayed || string(res.Value) != "bob's" {
		t.Fatalf("bob got %q replayed=%v", res.Value, res.Replayed)
	}
	// Splitting scope and key differently names another record.
	if res := run("a:b", "c", "1"); res.Replayed {
		t.Fatal("a:b/c replayed")
	}
	if res := run("a", "b:c", "2"); res.Replayed || string(res.Value) != "2" {
		t.Fatalf("a/b:c got %q replayed=%v", res.Value, res.Replayed)
	}
	// The unscoped Do is the empty scope.
	run("", "k", "unscoped")
	res, err := g.Do(ctx, "k", nil, func(context.Context) ([]byte, error) { return nil, errors.New("ran twice") })
	if err != nil || !res.Replayed || string(res.Value) != "unscoped" {
		t.Fatalf("Do after DoScoped(\"\"): %q %v %v", res.Value, res.Replayed, err)
	}
	if got, want := g.ScopedStoreKey("", "k"), g.StoreKey("k"); got != want {
		t.Fatalf("ScopedStoreKey(\"\", k) = %q, StoreKey(k) = %q", got, want)
	}
	if _, err := g.Store().Get(ctx, g.ScopedStoreKey("bob", "k")); err != nil {
		t.Fatalf("bob's record under ScopedStoreKey: %v", err)
	}
}

func TestScopeLengthIsCheckedApartFromTheKey(t *testing.T) {
	g := newGuard(t, newMem(t), idem.Config{MaxKeyLen: 4})
	ok := func(context.Context) ([]byte, error) { return nil, nil }
	if _, err := g.DoScoped(context.Background(), strings.Repeat("s", idem.MaxScopeLen), "kkkk", nil, ok); err != nil {
		t.Fatalf("a scope of MaxScopeLen and a key of MaxKeyLen: %v", err)
	}
	if _, err := g.DoScoped(context.Background(), strings.Repeat("s", idem.MaxScopeLen+1), "k", nil, ok); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("a scope over MaxScopeLen: %v, want ErrInvalidKey", err)
	}
	if _, err := g.DoScoped(context.Background(), "s", "kkkkk", nil, ok); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("a key over MaxKeyLen: %v, want ErrInvalidKey", err)
	}
}
