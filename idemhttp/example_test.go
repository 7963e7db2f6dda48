package idemhttp_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/memstore"
)

// send posts body to h with the key and prints what comes back.
func send(h http.Handler, key, body string, header ...string) {
	r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Printf("%d replayed=%t %s\n", w.Code, w.Header().Get(idemhttp.ReplayedHeader) == "true", strings.TrimSpace(w.Body.String()))
}

func Example() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	g, err := idem.New(store, idem.Config{Namespace: "charges", Wait: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	// One trusted caller: all requests share one key space. A server with
	// several clients scopes keys by the caller instead (see WithScope).
	mw, err := idemhttp.New(g, idemhttp.WithSharedScope())
	if err != nil {
		log.Fatal(err)
	}

	charges := 0
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, charges)
	}))
	key := `"8e03978e-40d5-43e8-bc93-6894a57f9324"`
	send(h, key, `{"amount":1000}`)
	send(h, key, `{"amount":1000}`) // a retry: replayed, not charged again
	send(h, key, `{"amount":2000}`) // the same key for another request
	fmt.Println("charges:", charges)
	// Output:
	// 201 replayed=false {"charge":1}
	// 201 replayed=true {"charge":1}
	// 422 replayed=false {"type":"https://pkg.go.dev/github.com/idemgo/idem#ErrKeyReused","title":"Idempotency-Key is already used","status":422,"detail":"This Idempotency-Key was used with a different request; use a new key for a new request."}
	// charges: 1
}

// Keys scoped by the caller's account: two accounts sending the same key
// get their own responses.
func ExampleWithScope() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	g, _ := idem.New(store, idem.Config{Namespace: "charges"})
	defer g.Close()
	mw, err := idemhttp.New(g, idemhttp.WithScope(func(r *http.Request) string {
		return r.Header.Get("X-Account") // in real code: the authenticated principal
	}))
	if err != nil {
		log.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "charged %s", r.Header.Get("X-Account"))
	}))
	send(h, `"k1"`, "{}", "X-Account", "alice")
	send(h, `"k1"`, "{}", "X-Account", "bob")
	send(h, `"k1"`, "{}", "X-Account", "alice")
	// Output:
	// 200 replayed=false charged alice
	// 200 replayed=false charged bob
	// 200 replayed=true charged alice
}

// Wrapping the default error handler to add a documentation link (as the
// IETF draft suggests) and keep the problem details.
func ExampleWithErrorHandler() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	g, _ := idem.New(store, idem.Config{})
	defer g.Close()
	mw, err := idemhttp.New(g, idemhttp.WithSharedScope(), idemhttp.WithRequired(), idemhttp.WithErrorHandler(
		func(w http.ResponseWriter, r *http.Request, err error) {
			w.Header().Set("Link", `<https://developer.example.com/idempotency>; rel="describedby"`)
			idemhttp.DefaultErrorHandler(w, r, err)
		}))
	if err != nil {
		log.Fatal(err)
	}
	h := mw(http.NotFoundHandler())
	r := httptest.NewRequest(http.MethodPost, "/charges", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("Link"))
	fmt.Println(w.Body)
	// Output:
	// 400 <https://developer.example.com/idempotency>; rel="describedby"
	// {"type":"https://pkg.go.dev/github.com/idemgo/idem/idemhttp#ErrKeyMissing","title":"Idempotency-Key is missing","status":400,"detail":"This operation requires an Idempotency-Key header."}
}

func ExampleParseKey() {
	for _, v := range []string{`"8e03978e"`, `8e03978e`, `"a\"b";v=1`, `"a", "b"`} {
		lenient, err1 := idemhttp.ParseKey(v, idemhttp.Lenient)
		strict, err2 := idemhttp.ParseKey(v, idemhttp.Strict)
		fmt.Printf("%-12s lenient %q %v | strict %q %v\n", v, lenient, err1 == nil, strict, err2 == nil)
	}
	// Output:
	// "8e03978e"   lenient "8e03978e" true | strict "8e03978e" true
	// 8e03978e     lenient "8e03978e" true | strict "" false
	// "a\"b";v=1   lenient "a\"b" true | strict "a\"b" true
	// "a", "b"     lenient "" false | strict "" false
}
