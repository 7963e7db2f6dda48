package httpstores_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"
	"github.com/idemgo/idem/idemtest"

	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/idemhttp/idemhttptest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every case of the suite has a Guard in a namespace of its own, so the
// cases share one store.

func TestHTTPRedis(t *testing.T) {
	s := redisstoretest.Store(t, redisstoretest.Client(t), redisstore.Config{})
	idemhttptest.Run(t, func(t *testing.T) storage.Store { return s })
}

func TestHTTPPostgres(t *testing.T) {
	s := pgstoretest.Store(t, pgstoretest.Pool(t, 0), pgstore.Config{})
	idemhttptest.Run(t, func(t *testing.T) storage.Store { return s })
}

// A response body of exactly the middleware's default cap (1 MiB) fits
// the cap but, with its head, not redisstore's default value limit: over
// the real Redis it is stored without its body, so the retry gets its
// status and a problem, and the handler runs once. The key is never left
// in progress.
func TestHTTPRedisBodyAtTheValueLimit(t *testing.T) {
	var store storage.Store = redisstoretest.Store(t, redisstoretest.Client(t), redisstore.Config{})
	g := idemtest.Guard(t, store, idem.Config{Namespace: "limit"})
	mw, err := idemhttp.New(g, idemhttp.WithSharedScope())
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	body := bytes.Repeat([]byte("x"), idemhttp.DefaultMaxCachedBytes)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	}))
	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/reports", nil)
		r.Header.Set("Idempotency-Key", `"1mib"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := send(); w.Code != http.StatusCreated || w.Body.Len() != len(body) {
		t.Fatalf("first request: %d with %d bytes, want 201 with all %d", w.Code, w.Body.Len(), len(body))
	}
	w := send()
	var p idemhttp.Problem
	json.Unmarshal(w.Body.Bytes(), &p)
	if w.Code != http.StatusCreated || w.Header().Get(idemhttp.ReplayedHeader) != "true" || p.Type != idemhttp.TypeResponseNotKept {
		t.Fatalf("retry: %d, replayed %q, %s; want 201 replayed with a problem of type %s",
			w.Code, w.Header().Get(idemhttp.ReplayedHeader), w.Body.Bytes(), idemhttp.TypeResponseNotKept)
	}
	if runs.Load() != 1 {
		t.Fatalf("the handler ran %d times, want once", runs.Load())
	}
}

func TestHTTPDynamoDB(t *testing.T) {
	s := dynamostoretest.Store(t, dynamostoretest.Client(t), dynamostore.Config{})
	idemhttptest.Run(t, func(t *testing.T) storage.Store { return s })
}
