// Package idemhttptest holds the behaviour suite of package idemhttp's
// middleware, run over any [storage.Store], so every store module can check
// that the middleware works over it:
//
//	func TestHTTP(t *testing.T) {
//		idemhttptest.Run(t, func(t *testing.T) storage.Store { return newStore(t) })
//	}
//
// Each case is a parallel subtest with a Guard of its own in a random
// namespace, so newStore may return one shared store.
package idemhttptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/internal/adaptertest"
	"github.com/idemgo/idem/storage"
)

// Run runs the suite against the stores newStore returns.
func Run(t *testing.T, newStore func(t *testing.T) storage.Store) {
	adaptertest.Run(t, newStore, cases)
}

var cases = []adaptertest.Case{
	{"RetryReplaysFirstResponse", retryReplays},
	{"ReplayIsByteIdentical", replayByteIdentical},
	{"OtherMethodsPassThrough", otherMethodsPassThrough},
	{"MissingKeyPassesThrough", missingKeyPassesThrough},
	{"MissingKeyRequired", missingKeyRequired},
	{"InvalidKeysRefused", invalidKeysRefused},
	{"KeyFormsAreOneKey", keyFormsAreOneKey},
	{"KeyValidatorAndLength", keyValidatorAndLength},
	{"BodyTooLarge", bodyTooLarge},
	{"BodyGivenBackToHandler", bodyGivenBack},
	{"KeyReusedWithAnotherRequest", keyReused},
	{"ConcurrentWithWaitRunOnce", concurrentWithWait},
	{"ConcurrentWithoutWaitConflict", concurrentWithoutWait},
	{"ConcurrentBurstWithoutWait", concurrentBurstWithoutWait},
	{"StoredAfterClientDisconnect", storedAfterDisconnect},
	{"StoredWhenClientLeavesMidResponse", storedWhenClientLeaves},
	{"ServerErrorReleased", serverErrorReleased},
	{"ServerErrorCachedWhenAsked", serverErrorCached},
	{"ClientErrorStored", clientErrorStored},
	{"PanicReleases", panicReleases},
	{"ScopesNeverCross", scopesNeverCross},
	{"LargeResponseStoredWithoutBody", largeResponseWithoutBody},
	{"StoreLimitNeverExceeded", storeLimitNeverExceeded},
	{"PerCallerHeadersNotStored", perCallerHeadersNotStored},
	{"OuterHeadersNeitherStoredNorOverwritten", outerHeadersKept},
	{"OverriddenOuterHeadersReplayed", overriddenOuterHeadersReplayed},
	{"EndedRequestNotStored", endedRequestNotStored},
	{"StoredPermanentFailure", storedPermanentFailure},
	{"StoreUnavailable", storeUnavailable},
	{"TooManyAttempts", tooManyAttempts},
	{"StreamsAndFlushesThrough", streamsThrough},
	{"HijackedNotStored", hijackedNotStored},
	{"InformationalStatusNotFinal", informationalNotFinal},
	{"TokenInHandlerContext", tokenInContext},
	{"UndecodableStoredResponse", undecodableStored},
	{"CustomErrorHandler", customErrorHandler},
	{"EmptyResponse", emptyResponse},
}

// newGuard returns a Guard over s in a namespace of its own, closed at the
// end of the test.
var newGuard = adaptertest.NewGuard

// account is the scope of a request in the suite: its X-Account header,
// as an authentication middleware would set it.
func account(r *http.Request) string { return r.Header.Get("X-Account") }

// wrap returns next behind the middleware over g, scoped by account.
func wrap(t *testing.T, g *idem.Guard, next http.Handler, opts ...idemhttp.Option) http.Handler {
	t.Helper()
	mw, err := idemhttp.New(g, append([]idemhttp.Option{idemhttp.WithScope(account)}, opts...)...)
	if err != nil {
		t.Fatalf("idemhttp.New: %v", err)
	}
	return mw(next)
}

// counter is a handler that counts its runs and answers status with a body
// naming the run and echoing the request body.
type counter struct {
	runs   atomic.Int32
	status int
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Run", strconv.Itoa(int(n)))
	w.WriteHeader(cmp(c.status, http.StatusCreated))
	fmt.Fprintf(w, `{"run":%d,"body":%q}`, n, body)
}

func cmp(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// req is one request to send.
type req struct {
	method, target, body string
	keys                 []string // Idempotency-Key field lines
	header               http.Header
	ctx                  context.Context
}

func post(key, body string) req {
	return req{method: http.MethodPost, target: "/orders", body: body, keys: []string{key}}
}

// quoted returns key as the draft sends it: an RFC 8941 String.
func quoted(key string) string { return `"` + key + `"` }

// serve sends r through h in process and returns the response.
func serve(h http.Handler, r req) *http.Response {
	hr := httptest.NewRequest(cmpStr(r.method, http.MethodPost), cmpStr(r.target, "/orders"), strings.NewReader(r.body))
	if r.ctx != nil {
		hr = hr.WithContext(r.ctx)
	}
	maps.Copy(hr.Header, r.header)
	for _, k := range r.keys {
		hr.Header.Add("Idempotency-Key", k)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, hr)
	return w.Result()
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the response body: %v", err)
	}
	return string(b)
}

// want checks a response's status, whether it is a replay and, unless
// empty, its body.
func want(t *testing.T, what string, resp *http.Response, status int, replayed bool, body string) {
	t.Helper()
	got := readBody(t, resp)
	if resp.StatusCode != status {
		t.Errorf("%s: status %d, want %d (body %s)", what, resp.StatusCode, status, got)
	}
	if r := resp.Header.Get(idemhttp.ReplayedHeader) == "true"; r != replayed {
		t.Errorf("%s: replayed %v, want %v", what, r, replayed)
	}
	if body != "" && got != body {
		t.Errorf("%s: body %s, want %s", what, got, body)
	}
}

// wantProblem checks that resp is a problem details response of status and
// type, and returns it.
func wantProblem(t *testing.T, what string, resp *http.Response, status int, typ string) idemhttp.Problem {
	t.Helper()
	body := readBody(t, resp)
	if resp.StatusCode != status {
		t.Errorf("%s: status %d, want %d (body %s)", what, resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	if resp.Header.Get(idemhttp.ReplayedHeader) != "" {
		t.Errorf("%s: a refusal carries %s", what, idemhttp.ReplayedHeader)
	}
	var p idemhttp.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Errorf("%s: problem body %q: %v", what, body, err)
	}
	if p.Status != status || p.Type != typ || p.Title == "" || p.Detail == "" {
		t.Errorf("%s: problem %+v, want status %d, type %s, a title and a detail", what, p, status, typ)
	}
	return p
}

func wantRuns(t *testing.T, c *counter, n int32) {
	t.Helper()
	if got := c.runs.Load(); got != n {
		t.Errorf("the handler ran %d times, want %d", got, n)
	}
}

func retryReplays(t *testing.T, s storage.Store) {
	c := &counter{}
	h := wrap(t, newGuard(t, s, idem.Config{}), c)
	first := `{"run":1,"body":"amount=10"}`
	want(t, "first request", serve(h, post(quoted("k1"), "amount=10")), http.StatusCreated, false, first)
	resp := serve(h, post(quoted("k1"), "amount=10"))
	if resp.Header.Get("X-Run") != "1" {
		t.Errorf("replay: X-Run %q, want the first run's 1", resp.Header.Get("X-Run"))
	}
	want(t, "retry", resp, http.StatusCreated, true, first)
	want(t, "another key", serve(h, post(quoted("k2"), "amount=10")), http.StatusCreated, false, `{"run":2,"body":"amount=10"}`)
	wantRuns(t, c, 2)
}

func replayByteIdentical(t *testing.T, s storage.Store) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB: sent chunked
	var runs atomic.Int32
	h := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		h := w.Header()
		h.Set("Content-Type", "application/vnd.test+json; charset=utf-8")
		h.Set("Location", "/orders/42")
		h["X-Multi"] = []string{"a", "b, c", ""}
		h.Add("Set-Cookie", "a=1; Path=/")
		h.Add("Set-Cookie", "b=2; HttpOnly")
		h.Set("Cache-Control", "private, max-age=0")
		w.WriteHeader(http.StatusAccepted)
		if r.URL.Query().Get("big") != "" {
			for chunk := range slices.Chunk(big, 1000) {
				w.Write(chunk)
			}
			return
		}
		io.WriteString(w, `{"id":42}`)
	}), idemhttp.WithMaxCachedBytes(len(big)), idemhttp.WithUnstoredHeaders())
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	for _, target := range []string{"/orders", "/orders?big=1"} {
		send := func() (*http.Response, []byte) {
			r, _ := http.NewRequest(http.MethodPost, srv.URL+target, strings.NewReader("x"))
			r.Header.Set("Idempotency-Key", quoted("same"+target))
			resp, err := srv.Client().Do(r)
			if err != nil {
				t.Fatalf("POST %s: %v", target, err)
			}
			return resp, []byte(readBody(t, resp))
		}
		orig, origBody := send()
		replay, replayBody := send()
		if orig.Header.Get(idemhttp.ReplayedHeader) != "" || replay.Header.Get(idemhttp.ReplayedHeader) != "true" {
			t.Errorf("%s: %s is %q on the first response and %q on the replay, want none and true", target,
				idemhttp.ReplayedHeader, orig.Header.Get(idemhttp.ReplayedHeader), replay.Header.Get(idemhttp.ReplayedHeader))
		}
		if orig.StatusCode != http.StatusAccepted || replay.StatusCode != orig.StatusCode {
			t.Errorf("%s: status %d then %d, want %d twice", target, orig.StatusCode, replay.StatusCode, http.StatusAccepted)
		}
		if !bytes.Equal(origBody, replayBody) {
			t.Errorf("%s: replayed body (%d bytes) differs from the original (%d bytes)", target, len(replayBody), len(origBody))
		}
		oh, rh := orig.Header.Clone(), replay.Header.Clone()
		for _, h := range []http.Header{oh, rh} {
			h.Del("Date")
			h.Del(idemhttp.ReplayedHeader)
		}
		if !headersEqual(oh, rh) {
			t.Errorf("%s: replayed header\n%v\ndiffers from the original\n%v", target, rh, oh)
		}
		if !slices.Equal(orig.TransferEncoding, replay.TransferEncoding) {
			t.Errorf("%s: transfer encoding %v then %v", target, orig.TransferEncoding, replay.TransferEncoding)
		}
	}
	if runs.Load() != 2 {
		t.Errorf("the handler ran %d times for two keys, want 2", runs.Load())
	}
}

func headersEqual(a, b http.Header) bool {
	return maps.EqualFunc(a, b, func(x, y []string) bool { return slices.Equal(x, y) })
}

func otherMethodsPassThrough(t *testing.T, s storage.Store) {
	g := newGuard(t, s, idem.Config{})
	c := &counter{}
	h := wrap(t, g, c)
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodGet} {
		want(t, m, serve(h, req{method: m, keys: []string{quoted("k")}}), http.StatusCreated, false, "")
	}
	wantRuns(t, c, 4)

	// WithMethods replaces the set.
	c2 := &counter{}
	h = wrap(t, g, c2, idemhttp.WithMethods(http.MethodPut))
	want(t, "PUT", serve(h, req{method: http.MethodPut, keys: []string{quoted("p")}}), http.StatusCreated, false, "")
	want(t, "PUT again", serve(h, req{method: http.MethodPut, keys: []string{quoted("p")}}), http.StatusCreated, true, "")
	want(t, "POST", serve(h, post(quoted("p2"), "")), http.StatusCreated, false, "")
	want(t, "POST again", serve(h, post(quoted("p2"), "")), http.StatusCreated, false, "")
	wantRuns(t, c2, 3)
}

func missingKeyPassesThrough(t *testing.T, s storage.Store) {
	c := &counter{}
	h := wrap(t, newGuard(t, s, idem.Config{}), c)
	want(t, "no key", serve(h, req{body: "a"}), http.StatusCreated, false, `{"run":1,"body":"a"}`)
	want(t, "no key again", serve(h, req{body: "a"}), http.StatusCreated, false, `{"run":2,"body":"a"}`)
}

func missingKeyRequired(t *testing.T, s storage.Store) {
	c := &counter{}
	h := wrap(t, newGuard(t, s, idem.Config{}), c, idemhttp.WithRequired())
	wantProblem(t, "no key", serve(h, req{body: "a"}), http.StatusBadRequest, idemhttp.TypeKeyMissing)
	want(t, "GET without key", serve(h, req{method: http.MethodGet}), http.StatusCreated, false, "")
	want(t, "with key", serve(h, post(quoted("k"), "a")), http.StatusCreated, false, "")
	wantRuns(t, c, 2)
}

func invalidKeysRefused(t *testing.T, s storage.Store) {
	g := newGuard(t, s, idem.Config{})
	c := &counter{}
	lenient := wrap(t, g, c)
	strict := wrap(t, g, c, idemhttp.WithSyntax(idemhttp.Strict))
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"empty field", []string{""}},
		{"blank field", []string{"   "}},
		{"empty string", []string{`""`}},
		{"unterminated string", []string{`"abc`}},
		{"bad escape", []string{`"a\qb"`}},
		{"non-ASCII in string", []string{"\"caf\xc3\xa9\""}},
		{"control byte in string", []string{"\"a\x01b\""}},
		{"list of two", []string{`"a", "b"`}},
		{"two field lines", []string{`"a"`, `"a"`}},
		{"junk after string", []string{`"a" b`}},
		{"bad parameter", []string{`"a";B=1`}},
		{"bad parameter value", []string{`"a";b=@`}},
		{"bare with space", []string{"a b"}},
		{"bare with quote", []string{`a"b`}},
		{"bare non-ASCII", []string{"caf\xc3\xa9"}},
		{"256 bytes", []string{quoted(strings.Repeat("k", 256))}},
	} {
		for name, h := range map[string]http.Handler{"lenient": lenient, "strict": strict} {
			wantProblem(t, name+" "+tc.name, serve(h, req{body: "x", keys: tc.keys}), http.StatusBadRequest, idemhttp.TypeKeyInvalid)
		}
	}
	wantProblem(t, "strict bare key", serve(strict, post("abc", "x")), http.StatusBadRequest, idemhttp.TypeKeyInvalid)
	wantRuns(t, c, 0)
	want(t, "255 bytes", serve(lenient, post(quoted(strings.Repeat("k", 255)), "x")), http.StatusCreated, false, "")
	want(t, "255 bytes again", serve(strict, post(quoted(strings.Repeat("k", 255)), "x")), http.StatusCreated, true, "")
	wantRuns(t, c, 1)
}

func keyFormsAreOneKey(t *testing.T, s storage.Store) {
	c := &counter{}
	h := wrap(t, newGuard(t, s, idem.Config{}), c)
	want(t, "quoted", serve(h, post(`"8e03978e-40d5"`, "x")), http.StatusCreated, false, "")
	for _, k := range []string{"8e03978e-40d5", `  "8e03978e-40d5"  `, `"8e03978e-40d5";v=1;x="y";z=?1;n=-1.5;b=:aGk=:;t=tok/en`} {
		want(t, k, serve(h, post(k, "x")), http.StatusCreated, true, "")
	}
	// Escapes are undone: "a\\b" is the key a\b, which a bare key can carry.
	want(t, `"a\\b"`, serve(h, post(`"a\\b"`, "x")), http.StatusCreated, false, "")
	want(t, `a\b`, serve(h, post(`a\b`, "x")), http.StatusCreated, true, "")
	want(t, `"a\"b"`, serve(h, post(`"a\"b"`, "x")), http.StatusCreated, false, "")
	wantRuns(t, c, 3)
}

func keyValidatorAndLength(t *testing.T, s storage.Store) {
	c := &counter{}
	errNotUUID := errors.New("the key must be a UUID")
	h := wrap(t, newGuard(t, s, idem.Config{MaxKeyLen: 36, ValidateKey: func(key string) error {
		if len(key) != 36 {
			return errNotUUID
		}
		return nil
	}}), c)
	p := wantProblem(t, "refused by the validator", serve(h, post(quoted("short"), "x")), http.StatusBadRequest, idemhttp.TypeKeyInvalid)
	if !strings.Contains(p.Detail, errNotUUID.Error()) {
		t.Errorf("detail %q does not give the validator's reason %q", p.Detail, errNotUUID)
	}
	wantProblem(t, "37 bytes", serve(h, post(quoted(strings.Repeat("a", 37)), "x")), http.StatusBadRequest, idemhttp.TypeKeyInvalid)
	want(t, "a UUID", serve(h, post(quoted("8e03978e-40d5-43e8-bc93-6894a57f9324"), "x")), http.StatusCreated, false, "")
	wantRuns(t, c, 1)
}

func bodyTooLarge(t *testing.T, s storage.Store) {
	c := &counter{}
	h := wrap(t, newGuard(t, s, idem.Config{}), c, idemhttp.WithMaxBodyBytes(10))
	wantProblem(t, "11 bytes", serve(h, post(quoted("k"), "01234567890")), http.StatusRequestEntityTooLarge, idemhttp.TypeBodyTooLarge)

	// Without a Content-Length the cap holds while reading.
	r := httptest.NewRequest(http.MethodPost, "/orders", io.MultiReader(strings.NewReader("012345"), strings.NewReader("67890")))
	r.ContentLength = -1
	r.Header.Set("Idempotency-Key", quoted("k"))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	wantProblem(t, "11 bytes unannounced", w.Result(), http.StatusRequestEntityTooLarge, idemhttp.TypeBodyTooLarge)
	wantRuns(t, c, 0)
	want(t, "10 bytes", serve(h, post(quoted("k"), "0123456789")), http.StatusCreated, false, `{"run":1,"body":"0123456789"}`)
}

func bodyGivenBack(t *testing.T, s storage.Store) {
	body := strings.Repeat("payload-", 10_000)
	var got atomic.Value
	h := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("handler reading the body: %v", err)
		}
		got.Store(string(b))
	}))
	want(t, "post", serve(h, post(quoted("k"), body)), http.StatusOK, false, "")
	if got.Load() != body {
		t.Errorf("the handler read %d bytes, want the %d sent", len(got.Load().(string)), len(body))
	}
}

func keyReused(t *testing.T, s storage.Store) {
	c := &counter{}
	h := wrap(t, newGuard(t, s, idem.Config{}), c)
	orig := post(quoted("k"), "amount=10")
	orig.target = "/orders?currency=eur"
	want(t, "first", serve(h, orig), http.StatusCreated, false, "")
	for _, tc := range []struct {
		name string
		r    req
	}{
		{"another body", req{target: "/orders?currency=eur", body: "amount=11"}},
		{"another query", req{target: "/orders?currency=usd", body: "amount=10"}},
		{"another path", req{target: "/refunds?currency=eur", body: "amount=10"}},
		{"another method", req{method: http.MethodPatch, target: "/orders?currency=eur", body: "amount=10"}},
	} {
		tc.r.keys = []string{quoted("k")}
		wantProblem(t, tc.name, serve(h, tc.r), http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
	}
	want(t, "the original again", serve(h, orig), http.StatusCreated, true, "")
	wantRuns(t, c, 1)
}

// concurrent sends n copies of r through h at once and returns the
// responses.
func concurrent(h http.Handler, n int, r req) []*http.Response {
	resps := make([]*http.Response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			resps[i] = serve(h, r)
		})
	}
	close(start)
	wg.Wait()
	return resps
}

func concurrentWithWait(t *testing.T, s storage.Store) {
	const n = 100
	var arrived atomic.Int32
	c := &counter{}
	// The handler holds the key until every request has reached the
	// middleware, so most of them find it in progress and wait.
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for deadline := time.Now().Add(5 * time.Second); arrived.Load() < n && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		c.ServeHTTP(w, r)
	})
	mw := wrap(t, newGuard(t, s, idem.Config{Wait: 30 * time.Second}), slow)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		mw.ServeHTTP(w, r)
	})
	replayed := 0
	for i, resp := range concurrent(h, n, post(quoted("k"), "x")) {
		if resp.Header.Get(idemhttp.ReplayedHeader) == "true" {
			replayed++
		}
		want(t, fmt.Sprintf("request %d", i), resp, http.StatusCreated, resp.Header.Get(idemhttp.ReplayedHeader) == "true", `{"run":1,"body":"x"}`)
	}
	wantRuns(t, c, 1)
	if replayed != n-1 {
		t.Errorf("%d of %d responses replayed, want %d", replayed, n, n-1)
	}
}

func concurrentWithoutWait(t *testing.T, s storage.Store) {
	entered, release := make(chan struct{}), make(chan struct{})
	c := &counter{}
	h := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		c.ServeHTTP(w, r)
	}), idemhttp.WithRetryAfter(2500*time.Millisecond))
	first := make(chan *http.Response)
	go func() { first <- serve(h, post(quoted("k"), "x")) }()
	<-entered

	for i, resp := range concurrent(h, 100, post(quoted("k"), "x")) {
		wantProblem(t, fmt.Sprintf("request %d while in progress", i), resp, http.StatusConflict, idemhttp.TypeInProgress)
		if ra := resp.Header.Get("Retry-After"); ra != "3" {
			t.Errorf("request %d: Retry-After %q, want 3 (2.5s rounded up)", i, ra)
		}
	}
	close(release)
	want(t, "first", <-first, http.StatusCreated, false, `{"run":1,"body":"x"}`)
	want(t, "after", serve(h, post(quoted("k"), "x")), http.StatusCreated, true, `{"run":1,"body":"x"}`)
	wantRuns(t, c, 1)
}

func concurrentBurstWithoutWait(t *testing.T, s storage.Store) {
	const n = 100
	c := &counter{}
	h := wrap(t, newGuard(t, s, idem.Config{}), c)
	fresh, replays, conflicts := 0, 0, 0
	for i, resp := range concurrent(h, n, post(quoted("k"), "x")) {
		switch {
		case resp.StatusCode == http.StatusConflict:
			conflicts++
			wantProblem(t, fmt.Sprintf("request %d", i), resp, http.StatusConflict, idemhttp.TypeInProgress)
		case resp.Header.Get(idemhttp.ReplayedHeader) == "true":
			replays++
			want(t, fmt.Sprintf("request %d", i), resp, http.StatusCreated, true, `{"run":1,"body":"x"}`)
		default:
			fresh++
			want(t, fmt.Sprintf("request %d", i), resp, http.StatusCreated, false, `{"run":1,"body":"x"}`)
		}
	}
	wantRuns(t, c, 1)
	if fresh != 1 || fresh+replays+conflicts != n {
		t.Errorf("%d fresh, %d replays, %d conflicts; want 1 fresh and the rest replays or conflicts", fresh, replays, conflicts)
	}
}

// ctxStore refuses outcome writes under a context that ended, as a remote
// store does, whatever the store under it does with contexts.
type ctxStore struct{ storage.Store }

func (s ctxStore) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Complete(ctx, key, t, value, retention)
}

func storedAfterDisconnect(t *testing.T, s storage.Store) {
	c := &counter{}
	h := wrap(t, newGuard(t, ctxStore{s}, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.ServeHTTP(w, r)
		cancel := r.Context().Value(cancelKey{}).(context.CancelFunc)
		cancel() // the client goes away once the response is written
		if r.Context().Err() == nil {
			t.Error("the handler's context outlived the request's")
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	r := post(quoted("k"), "x")
	r.ctx = context.WithValue(ctx, cancelKey{}, cancel)
	want(t, "first", serve(h, r), http.StatusCreated, false, "")
	want(t, "retry", serve(h, post(quoted("k"), "x")), http.StatusCreated, true, `{"run":1,"body":"x"}`)
	wantRuns(t, c, 1)
}

type cancelKey struct{}

func storedWhenClientLeaves(t *testing.T, s storage.Store) {
	var full strings.Builder
	for i := range 51 {
		fmt.Fprintf(&full, "part%d;", i)
	}
	var runs atomic.Int32
	h := wrap(t, newGuard(t, s, idem.Config{Wait: 10 * time.Second}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		rc := http.NewResponseController(w)
		io.WriteString(w, "part0;")
		rc.Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
			t.Error("the request's context did not end when the client left")
		}
		// A careful handler stops at the first failed write. The middleware
		// lets it finish, so the whole response is stored for the retry.
		for i := 1; i <= 50; i++ {
			if _, err := fmt.Fprintf(w, "part%d;", i); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	send := func() *http.Response {
		r, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		r.Header.Set("Idempotency-Key", quoted("leaves"))
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		return resp
	}
	resp := send()
	first := make([]byte, len("part0;"))
	io.ReadFull(resp.Body, first)
	resp.Body.Close() // unread: the transport closes the connection
	want(t, "retry", send(), http.StatusOK, true, full.String())
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want 1", runs.Load())
	}
}

func serverErrorReleased(t *testing.T, s storage.Store) {
	c := &counter{status: http.StatusServiceUnavailable}
	h := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.ServeHTTP(w, r)
		c.status = http.StatusCreated // the next run succeeds
	}))
	want(t, "first", serve(h, post(quoted("k"), "x")), http.StatusServiceUnavailable, false, `{"run":1,"body":"x"}`)
	want(t, "retry", serve(h, post(quoted("k"), "x")), http.StatusCreated, false, `{"run":2,"body":"x"}`)
	want(t, "retry after success", serve(h, post(quoted("k"), "x")), http.StatusCreated, true, `{"run":2,"body":"x"}`)
	wantRuns(t, c, 2)
}

func serverErrorCached(t *testing.T, s storage.Store) {
	c := &counter{status: http.StatusInternalServerError}
	h := wrap(t, newGuard(t, s, idem.Config{}), c, idemhttp.WithCacheServerErrors())
	want(t, "first", serve(h, post(quoted("k"), "x")), http.StatusInternalServerError, false, "")
	want(t, "retry", serve(h, post(quoted("k"), "x")), http.StatusInternalServerError, true, `{"run":1,"body":"x"}`)
	wantRuns(t, c, 1)
}

func clientErrorStored(t *testing.T, s storage.Store) {
	c := &counter{status: http.StatusPaymentRequired}
	h := wrap(t, newGuard(t, s, idem.Config{}), c)
	want(t, "first", serve(h, post(quoted("k"), "x")), http.StatusPaymentRequired, false, "")
	want(t, "retry", serve(h, post(quoted("k"), "x")), http.StatusPaymentRequired, true, `{"run":1,"body":"x"}`)
	wantRuns(t, c, 1)

	// Except the statuses that ask for a retry.
	for i, status := range []int{http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusTooEarly, 499} {
		c.status = status
		key := quoted("retry-" + strconv.Itoa(status))
		want(t, "first", serve(h, post(key, "x")), status, false, "")
		want(t, "retry", serve(h, post(key, "x")), status, false, fmt.Sprintf(`{"run":%d,"body":"x"}`, 3+2*i))
	}
}

func panicReleases(t *testing.T, s storage.Store) {
	c := &counter{}
	boom := errors.New("boom")
	var panicked atomic.Bool
	h := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !panicked.Swap(true) {
			panic(boom)
		}
		c.ServeHTTP(w, r)
	}))
	func() {
		defer func() {
			if p := recover(); p != boom {
				t.Errorf("recovered %v, want the handler's panic %v", p, boom)
			}
		}()
		serve(h, post(quoted("k"), "x"))
	}()
	want(t, "retry after the panic", serve(h, post(quoted("k"), "x")), http.StatusCreated, false, `{"run":1,"body":"x"}`)
	want(t, "retry after success", serve(h, post(quoted("k"), "x")), http.StatusCreated, true, `{"run":1,"body":"x"}`)
}

func scopesNeverCross(t *testing.T, s storage.Store) {
	c := &counter{}
	h := wrap(t, newGuard(t, s, idem.Config{}), c)
	as := func(account, key, body string) req {
		r := post(key, body)
		r.header = http.Header{"X-Account": {account}}
		return r
	}
	// Same key, different payloads, different principals: both run.
	want(t, "alice", serve(h, as("alice", quoted("k"), "alice's")), http.StatusCreated, false, `{"run":1,"body":"alice's"}`)
	want(t, "bob", serve(h, as("bob", quoted("k"), "bob's")), http.StatusCreated, false, `{"run":2,"body":"bob's"}`)
	want(t, "alice again", serve(h, as("alice", quoted("k"), "alice's")), http.StatusCreated, true, `{"run":1,"body":"alice's"}`)
	want(t, "bob again", serve(h, as("bob", quoted("k"), "bob's")), http.StatusCreated, true, `{"run":2,"body":"bob's"}`)
	// Bob sending Alice's exact request gets his own run, never her response.
	want(t, "bob with alice's body", serve(h, as("bob", quoted("k2"), "alice's")), http.StatusCreated, false, `{"run":3,"body":"alice's"}`)
	// Scope and key are combined without ambiguity.
	want(t, "scope ab key c", serve(h, as("ab", "c", "x")), http.StatusCreated, false, `{"run":4,"body":"x"}`)
	want(t, "scope a key bc", serve(h, as("a", "bc", "x")), http.StatusCreated, false, `{"run":5,"body":"x"}`)
	// The longest scope and key still keep them apart.
	long := strings.Repeat("s", idem.MaxScopeLen)
	want(t, "long scope", serve(h, as(long, "k", "x")), http.StatusCreated, false, `{"run":6,"body":"x"}`)
	want(t, "long scope again", serve(h, as(long, "k", "x")), http.StatusCreated, true, `{"run":6,"body":"x"}`)
	want(t, "long scope, long key", serve(h, as(long, strings.Repeat("k", idem.DefaultMaxKeyLen), "x")), http.StatusCreated, false, `{"run":7,"body":"x"}`)
	// A scope longer than the Guard takes is refused, never cut short.
	wantProblem(t, "scope too long", serve(h, as(long+"s", "k", "x")), http.StatusBadRequest, idemhttp.TypeKeyInvalid)
	wantRuns(t, c, 7)
}

// A response whose body is over the cap is served in full, and stored
// without its body: the retry does not run the handler again, and gets the
// first status, the kept fields and a problem saying why the body is not
// there. The warning is logged and observed.
func largeResponseWithoutBody(t *testing.T, s storage.Store) {
	var runs atomic.Int32
	ops := &adaptertest.Ops{}
	var log adaptertest.Logs
	g := newGuard(t, s, idem.Config{Observer: ops.Observe, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	h := wrap(t, g, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Location", "/orders/7")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("ETag", `"v1"`)
		w.WriteHeader(http.StatusCreated)
		for range n / 100 {
			w.Write(bytes.Repeat([]byte{'x'}, 100))
		}
	}), idemhttp.WithMaxCachedBytes(1000))
	big := req{target: "/orders?n=5000", keys: []string{quoted("big")}}
	resp := serve(h, big)
	if body := readBody(t, resp); len(body) != 5000 || resp.StatusCode != http.StatusCreated || resp.Header.Get(idemhttp.ReplayedHeader) != "" {
		t.Errorf("first request: %d, %d bytes, replayed %q; want 201, all 5000 bytes, fresh", resp.StatusCode, len(body), resp.Header.Get(idemhttp.ReplayedHeader))
	}
	for i := range 2 {
		resp := serve(h, big)
		if loc := resp.Header.Get("Location"); loc != "/orders/7" {
			t.Errorf("retry %d: Location %q, want the first response's", i, loc)
		}
		if etag := resp.Header.Get("Etag"); etag != "" {
			t.Errorf("retry %d: ETag %q of a body that is not there", i, etag)
		}
		p := wantReplayedProblem(t, fmt.Sprintf("retry %d", i), resp, http.StatusCreated, idemhttp.TypeResponseNotKept)
		if !strings.Contains(p.Detail, "201") {
			t.Errorf("retry %d: detail %q does not give the first status", i, p.Detail)
		}
	}
	if runs.Load() != 1 {
		t.Errorf("a response too large to keep: the handler ran %d times for three requests, want once", runs.Load())
	}
	if n := ops.Count(idem.OpTooLarge); n != 1 {
		t.Errorf("the Observer saw %d %v events, want 1", n, idem.OpTooLarge)
	}
	if !strings.Contains(log.String(), "too large") || !strings.Contains(log.String(), "key=big") {
		t.Errorf("no warning logged for the response stored without its body:\n%s", log.String())
	}
	atCap := req{target: "/orders?n=1000", keys: []string{quoted("at-cap")}}
	want(t, "at the cap", serve(h, atCap), http.StatusCreated, false, "")
	want(t, "at the cap again", serve(h, atCap), http.StatusCreated, true, strings.Repeat("x", 1000))
	if runs.Load() != 2 {
		t.Errorf("a response at the cap: the handler ran %d times, want once", runs.Load()-1)
	}
}

// wantReplayedProblem checks that resp replays a stored status with a
// problem details body of type typ, and returns the problem.
func wantReplayedProblem(t *testing.T, what string, resp *http.Response, status int, typ string) idemhttp.Problem {
	t.Helper()
	body := readBody(t, resp)
	var p idemhttp.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Errorf("%s: problem body %q: %v", what, body, err)
	}
	if resp.StatusCode != status || resp.Header.Get(idemhttp.ReplayedHeader) != "true" ||
		resp.Header.Get("Content-Type") != "application/problem+json" || p.Type != typ || p.Status != status || p.Detail == "" {
		t.Errorf("%s: %d, replayed %q, %s, problem %+v; want %d replayed with a problem of type %s",
			what, resp.StatusCode, resp.Header.Get(idemhttp.ReplayedHeader), resp.Header.Get("Content-Type"), p, status, typ)
	}
	return p
}

// Over a store that keeps values of 1000 bytes, a body of exactly the cap
// fits the middleware's cap but not, with its head, the store: it is
// stored without its body instead of leaving the key in progress, and the
// handler never runs twice.
func storeLimitNeverExceeded(t *testing.T, s storage.Store) {
	var runs atomic.Int32
	h := wrap(t, newGuard(t, adaptertest.LimitStore{Store: s, Max: 1000}, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Write(bytes.Repeat([]byte{'x'}, n))
	}), idemhttp.WithMaxCachedBytes(1000))
	exact := req{target: "/orders?n=1000", keys: []string{quoted("exact")}}
	if body := readBody(t, serve(h, exact)); len(body) != 1000 {
		t.Errorf("first request: %d bytes, want 1000", len(body))
	}
	wantReplayedProblem(t, "retry", serve(h, exact), http.StatusOK, idemhttp.TypeResponseNotKept)
	small := req{target: "/orders?n=900", keys: []string{quoted("small")}}
	want(t, "a response that fits", serve(h, small), http.StatusOK, false, "")
	want(t, "a response that fits, again", serve(h, small), http.StatusOK, true, strings.Repeat("x", 900))
	if runs.Load() != 2 {
		t.Errorf("the handler ran %d times for two keys, want 2", runs.Load())
	}
}

// Set-Cookie and the other per-caller fields are not stored: a retry
// never gets the first request's session. WithUnstoredHeaders replaces
// the list.
func perCallerHeadersNotStored(t *testing.T, s storage.Store) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "session=first; HttpOnly")
		w.Header().Set("X-Session", "first")
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(http.StatusCreated)
	})
	g := newGuard(t, s, idem.Config{})
	for _, tc := range []struct {
		name             string
		opts             []idemhttp.Option
		cookie, xsession string // on the replay
	}{
		{"default", nil, "", "first"},
		{"replaced", []idemhttp.Option{idemhttp.WithUnstoredHeaders("X-Session")}, "session=first; HttpOnly", ""},
	} {
		h := wrap(t, g, handler, tc.opts...)
		key := quoted("k-" + tc.name)
		if resp := serve(h, post(key, "x")); resp.Header.Get("Set-Cookie") == "" {
			t.Errorf("%s: the first response lost its Set-Cookie", tc.name)
		}
		resp := serve(h, post(key, "x"))
		if resp.Header.Get(idemhttp.ReplayedHeader) != "true" || resp.Header.Get("Location") != "/orders/1" {
			t.Errorf("%s: replay %v", tc.name, resp.Header)
		}
		if c, x := resp.Header.Get("Set-Cookie"), resp.Header.Get("X-Session"); c != tc.cookie || x != tc.xsession {
			t.Errorf("%s: replayed Set-Cookie %q, X-Session %q; want %q, %q", tc.name, c, x, tc.cookie, tc.xsession)
		}
	}
}

// Fields an outer handler sets before the middleware runs belong to that
// request: they are not stored, and a replay keeps the retry's own.
func outerHeadersKept(t *testing.T, s storage.Store) {
	var seq atomic.Int32
	inner := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(http.StatusCreated)
	}), idemhttp.WithUnstoredHeaders())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := strconv.Itoa(int(seq.Add(1)))
		w.Header().Set("X-Request-Id", "req-"+n)
		w.Header().Add("Set-Cookie", "rotated="+n)
		inner.ServeHTTP(w, r)
	})
	serve(h, post(quoted("k"), "x"))
	resp := serve(h, post(quoted("k"), "x"))
	if resp.Header.Get(idemhttp.ReplayedHeader) != "true" || resp.Header.Get("Location") != "/orders/1" {
		t.Fatalf("retry: %d %v, want the replay", resp.StatusCode, resp.Header)
	}
	if id, c := resp.Header.Values("X-Request-Id"), resp.Header.Values("Set-Cookie"); !slices.Equal(id, []string{"req-2"}) || !slices.Equal(c, []string{"rotated=2"}) {
		t.Errorf("replay: X-Request-Id %q, Set-Cookie %q; want the retry's own, req-2 and rotated=2", id, c)
	}
}

// A field an outer handler sets and the handler overrides (a default
// Content-Type, Cache-Control) is the handler's answer: the replay carries
// the handler's value, as the first response did, while the outer fields
// the handler left alone stay the retry's own.
func overriddenOuterHeadersReplayed(t *testing.T, s storage.Store) {
	var seq atomic.Int32
	inner := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "private, max-age=60")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":1}`)
	}))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Request-Id", "req-"+strconv.Itoa(int(seq.Add(1))))
		inner.ServeHTTP(w, r)
	})
	first := serve(h, post(quoted("k"), "x"))
	resp := serve(h, post(quoted("k"), "x"))
	if resp.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %v, want the replay", resp.StatusCode, resp.Header)
	}
	for _, f := range []string{"Content-Type", "Cache-Control"} {
		if got, want := resp.Header.Values(f), first.Header.Values(f); !slices.Equal(got, want) {
			t.Errorf("replayed %s %q, want the first response's %q", f, got, want)
		}
	}
	if got := resp.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("replayed Content-Type %q, want the handler's application/json", got)
	}
	if id := resp.Header.Values("X-Request-Id"); !slices.Equal(id, []string{"req-2"}) {
		t.Errorf("replayed X-Request-Id %q, want the retry's own req-2", id)
	}
}

// A handler that returns without answering because its request ended
// (client gone, lease lost, Guard closed) leaves nothing stored: the retry
// runs it again.
func endedRequestNotStored(t *testing.T, s storage.Store) {
	c := &counter{}
	var calls atomic.Int32
	h := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			r.Context().Value(cancelKey{}).(context.CancelFunc)() // the client goes away
			<-r.Context().Done()
			return // a careful handler stops, and writes nothing
		}
		c.ServeHTTP(w, r)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	first := post(quoted("k"), "x")
	first.ctx = context.WithValue(ctx, cancelKey{}, cancel)
	serve(h, first)
	want(t, "retry", serve(h, post(quoted("k"), "x")), http.StatusCreated, false, `{"run":1,"body":"x"}`)
	want(t, "retry after the answer", serve(h, post(quoted("k"), "x")), http.StatusCreated, true, `{"run":1,"body":"x"}`)
}

// A permanent failure stored under the key (by other code sharing the
// Guard's namespace) is answered with a problem that says so, not 500.
func storedPermanentFailure(t *testing.T, s storage.Store) {
	h, c, err := storeUnderK(t, s, func(context.Context) ([]byte, error) {
		return nil, idem.Permanent(errors.New("card declined"))
	})
	if !idem.IsPermanent(err) {
		t.Fatalf("storing a permanent failure: %v", err)
	}
	p := wantProblem(t, "a stored failure", serve(h, post(quoted("k"), "x")), http.StatusUnprocessableEntity, idemhttp.TypeStoredFailure)
	if strings.Contains(p.Detail, "card declined") {
		t.Errorf("the detail %q shows the stored error to the client", p.Detail)
	}
	wantRuns(t, c, 0)
}

// storeUnderK stores fn's outcome under the key "k" of a fresh Guard
// over s, and returns a middleware over that Guard whose every request has
// the same fingerprint, so a request with "k" gets that outcome; with the
// handler behind it, and fn's error.
func storeUnderK(t *testing.T, s storage.Store, fn func(context.Context) ([]byte, error)) (http.Handler, *counter, error) {
	g := newGuard(t, s, idem.Config{})
	payload := []byte("fixed")
	c := &counter{}
	h := wrap(t, g, c, idemhttp.WithFingerprint(func(*http.Request, []byte) []byte { return payload }))
	_, err := g.DoScoped(context.Background(), "", "k", payload, fn)
	return h, c, err
}

// downStore is a store whose every call fails, as a store that cannot be
// reached.
type downStore struct{ storage.Store }

var errDown = errors.New("idemhttptest: store down")

func (downStore) Claim(context.Context, storage.ClaimArgs) (storage.Claim, error) {
	return storage.Claim{}, errDown
}

func storeUnavailable(t *testing.T, s storage.Store) {
	c := &counter{}
	g := newGuard(t, downStore{s}, idem.Config{})
	p := wantProblem(t, "fail closed", serve(wrap(t, g, c), post(quoted("k"), "x")), http.StatusServiceUnavailable, idemhttp.TypeStoreUnavailable)
	if strings.Contains(p.Detail, errDown.Error()) {
		t.Errorf("the detail %q shows the store's error to the client", p.Detail)
	}
	wantRuns(t, c, 0)
	open := newGuard(t, downStore{s}, idem.Config{FailOpen: true})
	resp := serve(wrap(t, open, c), post(quoted("k"), "x"))
	want(t, "fail open", resp, http.StatusCreated, false, `{"run":1,"body":"x"}`)
}

func tooManyAttempts(t *testing.T, s storage.Store) {
	c := &counter{status: http.StatusInternalServerError}
	h := wrap(t, newGuard(t, s, idem.Config{MaxAttempts: 2}), c)
	want(t, "attempt 1", serve(h, post(quoted("k"), "x")), http.StatusInternalServerError, false, "")
	want(t, "attempt 2", serve(h, post(quoted("k"), "x")), http.StatusInternalServerError, false, "")
	wantProblem(t, "attempt 3", serve(h, post(quoted("k"), "x")), http.StatusUnprocessableEntity, idemhttp.TypeTooManyAttempts)
	wantRuns(t, c, 2)
}

func streamsThrough(t *testing.T, s storage.Store) {
	read := make(chan struct{})
	var runs atomic.Int32
	h := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("ResponseController.SetWriteDeadline through the middleware: %v", err)
		}
		io.WriteString(w, "first;")
		if err := rc.Flush(); err != nil {
			t.Errorf("ResponseController.Flush: %v", err)
		}
		select {
		case <-read:
		case <-time.After(10 * time.Second):
			t.Error("the client did not get the flushed bytes: the middleware buffers the response")
		}
		io.WriteString(w, "second")
		w.(http.Flusher).Flush()
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	send := func() *http.Response {
		r, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		r.Header.Set("Idempotency-Key", quoted("stream"))
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		return resp
	}
	resp := send()
	first := make([]byte, len("first;"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first;" {
		t.Errorf("read %q, %v; want the flushed %q", first, err, "first;")
	}
	close(read)
	if rest := readBody(t, resp); rest != "second" {
		t.Errorf("then read %q, want %q", rest, "second")
	}
	want(t, "replay", send(), http.StatusOK, true, "first;second")
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want 1", runs.Load())
	}
}

func hijackedNotStored(t *testing.T, s storage.Store) {
	var runs atomic.Int32
	// The client has its answer before the handler returns and the key is
	// released: the retry waits for that.
	h := wrap(t, newGuard(t, s, idem.Config{Wait: 10 * time.Second}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack through the middleware: %v", err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
		brw.Flush()
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for i := range 2 {
		r, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		r.Header.Set("Idempotency-Key", quoted("hijack"))
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatalf("POST %d: %v", i, err)
		}
		want(t, fmt.Sprintf("request %d", i), resp, http.StatusOK, false, "hi")
	}
	if runs.Load() != 2 {
		t.Errorf("a hijacked response: the handler ran %d times for two requests, want 2 (not stored)", runs.Load())
	}
}

func informationalNotFinal(t *testing.T, s storage.Store) {
	var runs atomic.Int32
	h := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created")
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for i, replayed := range []bool{false, true} {
		r, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		r.Header.Set("Idempotency-Key", quoted("hints"))
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatalf("POST %d: %v", i, err)
		}
		want(t, fmt.Sprintf("request %d", i), resp, http.StatusCreated, replayed, "created")
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want 1", runs.Load())
	}
}

func tokenInContext(t *testing.T, s storage.Store) {
	h := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := idem.TokenFrom(r.Context()); !ok || tok == 0 {
			t.Errorf("idem.TokenFrom(handler's context) = %v, %v; want the lease token", tok, ok)
		}
	}))
	want(t, "post", serve(h, post(quoted("k"), "x")), http.StatusOK, false, "")
}

func undecodableStored(t *testing.T, s storage.Store) {
	h, c, err := storeUnderK(t, s, func(context.Context) ([]byte, error) {
		return []byte("not a stored response"), nil
	})
	if err != nil {
		t.Fatalf("storing a bad value: %v", err)
	}
	wantProblem(t, "replay of a bad value", serve(h, post(quoted("k"), "x")), http.StatusInternalServerError, idemhttp.TypeStoredResponse)
	wantRuns(t, c, 0)
}

func customErrorHandler(t *testing.T, s storage.Store) {
	var seen atomic.Value
	h := wrap(t, newGuard(t, s, idem.Config{}), &counter{}, idemhttp.WithRequired(), idemhttp.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		seen.Store(err)
		w.Header().Set("Link", `<https://example.com/docs/idempotency>; rel="describedby"`)
		idemhttp.DefaultErrorHandler(w, r, err)
	}))
	resp := serve(h, req{body: "x"})
	if resp.Header.Get("Link") == "" {
		t.Error("the custom error handler did not answer")
	}
	wantProblem(t, "no key", resp, http.StatusBadRequest, idemhttp.TypeKeyMissing)
	err, _ := seen.Load().(error)
	if e, ok := errors.AsType[*idemhttp.Error](err); !ok || !errors.Is(err, idemhttp.ErrKeyMissing) || e.Status != http.StatusBadRequest {
		t.Errorf("the error handler got %#v, want an *idemhttp.Error wrapping ErrKeyMissing", err)
	}
}

func emptyResponse(t *testing.T, s storage.Store) {
	var runs atomic.Int32
	h := wrap(t, newGuard(t, s, idem.Config{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("X-Empty", "yes")
	}))
	for i, replayed := range []bool{false, true} {
		resp := serve(h, post(quoted("k"), "x"))
		if resp.Header.Get("X-Empty") != "yes" {
			t.Errorf("request %d: X-Empty %q, want yes", i, resp.Header.Get("X-Empty"))
		}
		want(t, fmt.Sprintf("request %d", i), resp, http.StatusOK, replayed, "")
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want 1", runs.Load())
	}
}
