package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOrdersMemstore(t *testing.T) {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	testOrders(t, s)
	testConcurrentRetries(t, s)
}

func TestOrdersRedis(t *testing.T) {
	s := redisstoretest.Store(t, redisstoretest.Client(t), redisstore.Config{})
	testOrders(t, s)
	testConcurrentRetries(t, s)
}

// response is what a request got back.
type response struct {
	status int
	header http.Header
	body   []byte
}

// api is an order API server over a store, for one test.
type api struct {
	t      *testing.T
	srv    *httptest.Server
	orders *orders
}

func newTestAPI(t *testing.T, store storage.Store) *api {
	h, o, closeAPI, err := newAPI(store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAPI)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &api{t: t, srv: srv, orders: o}
}

// send sends a request as account ("" for none) with the Idempotency-Key
// key ("" for none).
func (a *api) send(method, path, account, key, body string) response {
	a.t.Helper()
	r, err := http.NewRequest(method, a.srv.URL+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if account != "" {
		r.Header.Set("Authorization", "Bearer "+account)
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	resp, err := a.srv.Client().Do(r)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return response{resp.StatusCode, resp.Header, b}
}

func (a *api) post(account, key, body string) response {
	a.t.Helper()
	return a.send(http.MethodPost, "/orders", account, key, body)
}

func (a *api) wantOrders(n int, why string) {
	a.t.Helper()
	if got := a.orders.count(); got != n {
		a.t.Errorf("%s: %d orders exist, want %d", why, got, n)
	}
}

func replayed(r response) bool { return r.header.Get(idemhttp.ReplayedHeader) == "true" }

// wantCreated checks that r is a fresh 201 with an order and returns it.
func wantCreated(t *testing.T, what string, r response) order {
	t.Helper()
	if r.status != http.StatusCreated || replayed(r) {
		t.Fatalf("%s: %d replayed=%t %s, want a fresh 201", what, r.status, replayed(r), r.body)
	}
	var o order
	if err := json.Unmarshal(r.body, &o); err != nil || o.ID == "" {
		t.Fatalf("%s: body %s is not an order: %v", what, r.body, err)
	}
	if loc := r.header.Get("Location"); loc != "/orders/"+o.ID {
		t.Errorf("%s: Location %q, want /orders/%s", what, loc, o.ID)
	}
	return o
}

// wantProblem checks that r is a problem of status (and type, unless
// empty) whose detail holds detail, and that it is not a replay.
func wantProblem(t *testing.T, what string, r response, status int, typ, detail string) {
	t.Helper()
	var p idemhttp.Problem
	err := json.Unmarshal(r.body, &p)
	switch {
	case r.status != status || err != nil:
		t.Errorf("%s: %d %s, want a %d problem", what, r.status, r.body, status)
	case r.header.Get("Content-Type") != "application/problem+json":
		t.Errorf("%s: Content-Type %q, want application/problem+json", what, r.header.Get("Content-Type"))
	case typ != "" && p.Type != typ:
		t.Errorf("%s: problem type %q, want %q", what, p.Type, typ)
	case !strings.Contains(p.Detail, detail):
		t.Errorf("%s: detail %q, want it to say %q", what, p.Detail, detail)
	case replayed(r):
		t.Errorf("%s: a replay, want a fresh answer", what)
	}
}

func testOrders(t *testing.T, store storage.Store) {
	a := newTestAPI(t, store)
	const body = `{"customer":"Ada","amount_cents":1250}`
	key := rand.Text()

	first := a.post("alice", key, body)
	ord := wantCreated(t, "first POST", first)
	if ord.Customer != "Ada" || ord.AmountCents != 1250 {
		t.Errorf("created %+v, want Ada's order of 1250 cents", ord)
	}

	retry := a.post("alice", key, body)
	if retry.status != http.StatusCreated || !replayed(retry) {
		t.Errorf("retry: %d with %s %q, want 201 replayed", retry.status, idemhttp.ReplayedHeader, retry.header.Get(idemhttp.ReplayedHeader))
	}
	if !bytes.Equal(retry.body, first.body) {
		t.Errorf("retry: body\n%s\nwant the first one's, byte for byte:\n%s", retry.body, first.body)
	}
	if h1, h2 := withoutVolatile(first.header), withoutVolatile(retry.header); !maps.EqualFunc(h1, h2, slices.Equal) {
		t.Errorf("retry: header\n%v\nwant the first one's\n%v", h2, h1)
	}
	a.wantOrders(1, "after a retry")

	got := a.send(http.MethodGet, "/orders/"+ord.ID, "alice", "", "")
	if got.status != http.StatusOK || !bytes.Equal(got.body, first.body) {
		t.Errorf("GET the order: %d %s, want 200 %s", got.status, got.body, first.body)
	}

	reused := a.post("alice", key, `{"customer":"Ada","amount_cents":99900}`)
	wantProblem(t, "the key with another body", reused, http.StatusUnprocessableEntity, idemhttp.TypeKeyReused, "")
	a.wantOrders(1, "after a reused key")

	// Another account's key of the same name is its own.
	bob := wantCreated(t, "Bob's POST with Alice's key", a.post("bob", key, body))
	if bob.ID == ord.ID {
		t.Errorf("Bob was given Alice's order %s", ord.ID)
	}
	a.wantOrders(2, "after Bob's order")
	wantProblem(t, "Bob reading Alice's order", a.send(http.MethodGet, "/orders/"+ord.ID, "bob", "", ""), http.StatusNotFound, "", "")

	wantProblem(t, "no key", a.post("alice", "", body), http.StatusBadRequest, idemhttp.TypeKeyMissing, "")
	wantProblem(t, "no account", a.post("", rand.Text(), body), http.StatusUnauthorized, "", "Authorization")
	a.wantOrders(2, "after refused requests")
}

// holdingStore holds back the first outcome until n claims were made, so
// that concurrent duplicates find the key in progress.
type holdingStore struct {
	storage.Store
	n       int32
	claims  atomic.Int32
	arrived chan struct{} // closed at the nth claim
}

func (s *holdingStore) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	c, err := s.Store.Claim(ctx, a)
	if s.claims.Add(1) == s.n {
		close(s.arrived)
	}
	return c, err
}

func (s *holdingStore) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	select {
	case <-s.arrived:
	case <-ctx.Done(): // the Guard's StoreTimeout: the test fails, it does not hang
		return ctx.Err()
	}
	return s.Store.Complete(ctx, key, t, value, retention)
}

// testConcurrentRetries sends retries while the first request still runs:
// they wait for its response instead of getting 409, and one order is
// created.
func testConcurrentRetries(t *testing.T, store storage.Store) {
	const n = 20
	a := newTestAPI(t, &holdingStore{Store: store, n: n, arrived: make(chan struct{})})
	key := rand.Text()
	resps := make([]response, n)
	var wg sync.WaitGroup
	for i := range resps {
		wg.Go(func() { resps[i] = a.post("carol", key, `{"customer":"Grace","amount_cents":500}`) })
	}
	wg.Wait()
	fresh := 0
	for i, r := range resps {
		if !replayed(r) {
			fresh++
		}
		if r.status != http.StatusCreated || !bytes.Equal(r.body, resps[0].body) {
			t.Errorf("concurrent request %d: %d %s, want 201 %s", i, r.status, r.body, resps[0].body)
		}
	}
	if fresh != 1 {
		t.Errorf("%d of %d concurrent requests were fresh, want 1", fresh, n)
	}
	a.wantOrders(1, "after concurrent retries")
}

// withoutVolatile returns h without the fields that differ between a
// response and its replay.
func withoutVolatile(h http.Header) http.Header {
	h = h.Clone()
	h.Del("Date")
	h.Del(idemhttp.ReplayedHeader)
	return h
}

// listenLog passes the URL of the "listening" log line to a channel.
type listenLog struct{ urls chan string }

func (listenLog) Enabled(context.Context, slog.Level) bool { return true }
func (l listenLog) WithAttrs([]slog.Attr) slog.Handler     { return l }
func (l listenLog) WithGroup(string) slog.Handler          { return l }
func (l listenLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "url" {
			l.urls <- a.Value.String()
		}
		return true
	})
	return nil
}

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := listenLog{make(chan string, 1)}
	done := make(chan error, 1)
	go func() { done <- run(ctx, "127.0.0.1:0", "mem://", slog.New(log)) }()
	var base string
	select {
	case base = <-log.urls:
	case err := <-done:
		t.Fatalf("run ended before listening: %v", err)
	}
	r, err := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(`{"customer":"Ada","amount_cents":1}`))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer alice")
	r.Header.Set("Idempotency-Key", "k")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("POST /orders: %d, want 201", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()

	cancel()
	if err := <-done; err != nil {
		t.Errorf("run after cancel: %v, want nil", err)
	}
	if _, err := http.Post(base+"/orders", "application/json", nil); err == nil {
		t.Errorf("the server still answers after run returned")
	}
}

func TestBadOrdersRefused(t *testing.T) {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	a := newTestAPI(t, s)
	for _, tc := range []struct{ body, detail string }{
		{``, "the body is empty"},
		{`not json`, "invalid character"},
		{`{"customer":"Ada","amount_cents":`, "ends in the middle"},
		{`{"customer":"Ada","amount_cents":"12"}`, `"amount_cents" is a JSON string`},
		{`{"customer":"Ada","amount_cents":12.5}`, `"amount_cents" is a JSON number 12.5`},
		{`{"customer":["Ada"],"amount_cents":12}`, `"customer" is a JSON array`},
		{`{"customer":"Ada","amount_cents":12,"currency":"EUR"}`, `unknown field "currency"`},
		{`{"customer":"Ada","amount_cents":12} {}`, "one JSON object"},
		{`{"amount_cents":12}`, `"customer" is missing`},
		{`{"customer":"Ada","amount_cents":0}`, `"amount_cents" must be a positive`},
	} {
		r := a.post("alice", rand.Text(), tc.body)
		wantProblem(t, tc.body, r, http.StatusBadRequest, "", tc.detail)
	}
	a.wantOrders(0, "after bad bodies")
}

func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ url, err string }{
		{"ftp://example.com", `unsupported scheme "ftp"`},
		{"sqlite://orders.db", "not linked"},
		{"127.0.0.1:6379", "not a URL"},
		{"localhost", "no scheme"},
		{"redis://127.0.0.1:6379/x", "invalid database number"},
		{"redis://127.0.0.1:1/0?max_retries=-1", "cannot reach Redis"},
		{"redis://:s3cret@127.0.0.1:1/0?max_retries=-1", "xxxxx"},
	} {
		s, closeStore, err := openStore(ctx, tc.url)
		if err == nil {
			closeStore()
			t.Errorf("openStore(%q) = %T, want an error", tc.url, s)
			continue
		}
		if !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("openStore(%q): %v, want an error saying %q and no password", tc.url, err, tc.err)
		}
	}

	s, closeStore, err := openStore(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*memstore.Store); !ok {
		t.Errorf("mem:// opened a %T", s)
	}
	closeStore()
}

// wantWorking checks that s answers a Get of an unknown key: it reached its
// server and, for PostgreSQL, found its table.
func wantWorking(t *testing.T, s storage.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Get(ctx, "orders-test-"+rand.Text()); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("%T: Get of an unknown key: %v, want ErrNotFound", s, err)
	}
}

func TestOpenRedis(t *testing.T) {
	redisstoretest.Client(t) // skips without a server
	s, closeStore, err := openStore(context.Background(), "redis://"+redisstoretest.Addr()+"/0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if _, ok := s.(*redisstore.Store); !ok {
		t.Fatalf("redis:// opened a %T", s)
	}
	wantWorking(t, s)
}

func TestOpenPostgres(t *testing.T) {
	ctx := context.Background()
	pool := pgstoretest.Pool(t, 1)
	schema := pgstoretest.Schema(t, pool)
	// The store's default table, created by Migrate in the first schema of
	// the search path: the test's own.
	u, err := url.Parse(pgstoretest.URL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	s, closeStore, err := openStore(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if _, ok := s.(*pgstore.Store); !ok {
		t.Fatalf("postgres:// opened a %T", s)
	}
	wantWorking(t, s)
	var table *string
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1)::text", schema+"."+pgstore.DefaultTable).Scan(&table); err != nil || table == nil {
		t.Errorf("table %s.%s: %v, %v; want Migrate to have created it", schema, pgstore.DefaultTable, table, err)
	}
}

// The server bounds how long a client may take to send its request: the
// middleware reads a POST's body before the handler runs.
func TestServerBoundsReading(t *testing.T) {
	srv := newServer(http.NotFoundHandler())
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.ReadTimeout > time.Minute {
		t.Fatalf("ReadHeaderTimeout %v, ReadTimeout %v: a slow client could hold a connection and its body buffer indefinitely",
			srv.ReadHeaderTimeout, srv.ReadTimeout)
	}
}
