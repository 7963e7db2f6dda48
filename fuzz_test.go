package idem_test

import (
	"testing"

	"github.com/idemgo/idem/storage"
)

// FuzzStoreKey: two (namespace, key) pairs share a store key only when
// they are the same pair.
func FuzzStoreKey(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("", "\x01a", "\x01", "a")
	f.Add("ns", "", "n", "s")
	f.Fuzz(func(t *testing.T, ns1, k1, ns2, k2 string) {
		same := storage.StoreKey(ns1, k1) == storage.StoreKey(ns2, k2)
		if same != (ns1 == ns2 && k1 == k2) {
			t.Fatalf("StoreKey(%q, %q) == StoreKey(%q, %q) is %v", ns1, k1, ns2, k2, same)
		}
	})
}
