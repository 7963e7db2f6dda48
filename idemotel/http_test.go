package idemotel_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
)

// An idemhttp request's Guard spans are children of the span in the
// request's context (an otelhttp server span, say), and a retry answered
// from the Guard's local cache is counted as a cache hit.
func TestHTTPRequestSpansAndCacheHits(t *testing.T) {
	e := newEnv(t, idem.Config{Namespace: "charges", CacheSize: 100})
	mw, err := idemhttp.New(e.g, idemhttp.WithSharedScope())
	if err != nil {
		t.Fatal(err)
	}
	charges := 0
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
	}))
	post := func() (parent string) {
		ctx, span := e.tracer.Tracer("test").Start(t.Context(), "POST /charges")
		defer span.End()
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/charges", strings.NewReader(`{"amount":1000}`))
		r.Header.Set("Idempotency-Key", `"charge-1"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			t.Fatalf("status %d", w.Code)
		}
		return span.SpanContext().SpanID().String()
	}
	first := post()
	post() // a retry: the cache answers, no claim reaches the store
	if charges != 1 {
		t.Fatalf("charged %d times", charges)
	}
	names := map[string]bool{}
	for _, s := range e.spans.Ended() {
		if !strings.HasPrefix(s.Name(), "idem ") {
			continue
		}
		names[s.Name()] = true
		if s.Parent().SpanID().String() != first {
			t.Errorf("span %s is not a child of the request's span", s.Name())
		}
	}
	if !names["idem claim"] || !names["idem run"] || !names["idem complete"] {
		t.Errorf("idem spans %v, want claim, run and complete", names)
	}
	got := e.sums(t)
	if n := got["idem.cache.hits"]["idem.namespace=charges"]; n != 1 {
		t.Errorf("idem.cache.hits = %d, want 1 (%v)", n, got["idem.cache.hits"])
	}
	if n := got["idem.claims"]["idem.namespace=charges,idem.outcome=replayed"]; n != 1 {
		t.Errorf("replayed claims = %d, want 1 (%v)", n, got["idem.claims"])
	}
}
