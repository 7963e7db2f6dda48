package idem_test

import (
	"testing"

	"github.com/idemgo/idem/storage"
)

func TestSplitStoreKey(t *testing.T) {
	for _, tc := range [][3]string{{"ns", "tenant", "key"}, {"", "", ""}, {"a:b", "", "c"}, {string(make([]byte, 300)), "s", "k\x00"}} {
		ns, scope, key, ok := storage.SplitStoreKey(storage.ScopedStoreKey(tc[0], tc[1], tc[2]))
		if !ok || ns != tc[0] || scope != tc[1] || key != tc[2] {
			t.Errorf("SplitStoreKey(ScopedStoreKey(%q, %q, %q)) = %q, %q, %q, %v", tc[0], tc[1], tc[2], ns, scope, key, ok)
		}
		if sk := storage.ScopedStoreKey(tc[0], tc[1], tc[2]); len(sk) < len(storage.NamespacePrefix(tc[0])) || sk[:len(storage.NamespacePrefix(tc[0]))] != storage.NamespacePrefix(tc[0]) {
			t.Errorf("the store key of namespace %q does not start with its prefix", tc[0])
		}
	}
	for _, bad := range []string{"\x05ab", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "\x01a\x09b"} {
		if _, _, _, ok := storage.SplitStoreKey(bad); ok {
			t.Errorf("SplitStoreKey(%q) ok", bad)
		}
	}
}

func FuzzSplitStoreKey(f *testing.F) {
	f.Add("ns", "scope", "key")
	f.Fuzz(func(t *testing.T, ns, scope, key string) {
		gotNS, gotScope, gotKey, ok := storage.SplitStoreKey(storage.ScopedStoreKey(ns, scope, key))
		if !ok || gotNS != ns || gotScope != scope || gotKey != key {
			t.Fatalf("round trip of %q %q %q: %q %q %q %v", ns, scope, key, gotNS, gotScope, gotKey, ok)
		}
		storage.SplitStoreKey(ns + scope + key) // never panics
	})
}
