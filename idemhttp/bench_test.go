package idemhttp_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/memstore"
)

// discard is a ResponseWriter that costs nothing, so the benchmarks
// measure the middleware, not a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

var body = `{"amount":1000,"currency":"eur","customer":"cus_8e03978e40d5"}`

func handler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte(`{"id":"ch_1","status":"succeeded"}`))
}

// BenchmarkMiddleware compares a handler alone with the same handler behind
// the middleware over memstore: a request without a key, a first request
// (claim, run, complete) and a replay.
func BenchmarkMiddleware(b *testing.B) {
	store, err := memstore.New(memstore.Config{MaxEntries: 1 << 24})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	g := newGuard(b, store, idem.Config{})
	mw, err := idemhttp.New(g, idemhttp.WithSharedScope())
	if err != nil {
		b.Fatal(err)
	}
	wrapped := mw(http.HandlerFunc(handler))
	var seq atomic.Int64
	run := func(b *testing.B, h http.Handler, key func() string) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			w := &discard{h: http.Header{}}
			r, _ := http.NewRequest(http.MethodPost, "http://api/charges", nil)
			for pb.Next() {
				clear(w.h)
				r.Body, r.ContentLength = readCloser{strings.NewReader(body)}, int64(len(body))
				if k := key(); k != "" {
					r.Header = http.Header{"Idempotency-Key": {k}}
				} else {
					r.Header = http.Header{}
				}
				h.ServeHTTP(w, r)
			}
		})
	}
	b.Run("baseline", func(b *testing.B) { run(b, http.HandlerFunc(handler), func() string { return "" }) })
	b.Run("no-key", func(b *testing.B) { run(b, wrapped, func() string { return "" }) })
	b.Run("first", func(b *testing.B) {
		run(b, wrapped, func() string { return `"k` + strconv.FormatInt(seq.Add(1), 10) + `"` })
	})
	b.Run("replay", func(b *testing.B) { run(b, wrapped, func() string { return `"same"` }) })
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }
