package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/idem/idemhttp"
)

// This file is an ordinary order API: nothing in it knows about
// idempotency keys. main.go puts the idemhttp middleware in front of it.

// order is an order as the API stores and returns it.
type order struct {
	ID          string    `json:"id"`
	Customer    string    `json:"customer"`
	AmountCents int64     `json:"amount_cents"`
	CreatedAt   time.Time `json:"created_at"`
	account     string    // who created it; only they can read it
}

// newOrder is the body of POST /orders.
type newOrder struct {
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// orders keeps the orders in memory. A real service writes them to its
// database; see the README for what changes then.
type orders struct {
	mu   sync.Mutex
	byID map[string]order
}

func newOrders() *orders { return &orders{byID: map[string]order{}} }

// count returns how many orders exist.
func (o *orders) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.byID)
}

// routes returns the API's handler. protect wraps the handlers that create
// something: main.go passes the idempotency middleware.
func (o *orders) routes(protect func(http.Handler) http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", protect(http.HandlerFunc(o.create)))
	mux.HandleFunc("GET /orders/{id}", o.get)
	return authenticate(mux)
}

// create handles POST /orders: it creates an order and answers 201 with it.
func (o *orders) create(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var in newOrder
	if err := dec.Decode(&in); err != nil {
		badRequest(w, fmt.Sprintf("The body must be a JSON object {\"customer\": string, \"amount_cents\": integer}: %v.", jsonError(err)))
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		badRequest(w, "The body must hold one JSON object and nothing after it.")
		return
	}
	switch {
	case strings.TrimSpace(in.Customer) == "":
		badRequest(w, `"customer" is missing or empty.`)
		return
	case in.AmountCents <= 0:
		badRequest(w, `"amount_cents" must be a positive integer.`)
		return
	}

	ord := order{
		ID:          "ord_" + rand.Text(),
		Customer:    in.Customer,
		AmountCents: in.AmountCents,
		CreatedAt:   time.Now().UTC(),
		account:     accountFrom(r.Context()),
	}
	o.mu.Lock()
	o.byID[ord.ID] = ord
	o.mu.Unlock()

	w.Header().Set("Location", "/orders/"+ord.ID)
	writeJSON(w, http.StatusCreated, ord)
}

// get handles GET /orders/{id}. Another account's order is not found.
func (o *orders) get(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	ord, ok := o.byID[r.PathValue("id")]
	o.mu.Unlock()
	if !ok || ord.account != accountFrom(r.Context()) {
		idemhttp.WriteProblem(w, idemhttp.Problem{Status: http.StatusNotFound, Title: "Order not found",
			Detail: "No order of this account has this id."})
		return
	}
	writeJSON(w, http.StatusOK, ord)
}

// jsonError rewords the decoder's errors for a client, who knows the JSON
// and not our Go types.
func jsonError(err error) string {
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "the body is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the body ends in the middle of the JSON"
	case errors.As(err, &typeErr):
		return fmt.Sprintf("%q is a JSON %s", typeErr.Field, typeErr.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func badRequest(w http.ResponseWriter, detail string) {
	idemhttp.WriteProblem(w, idemhttp.Problem{Status: http.StatusBadRequest, Title: "Invalid order", Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// accountKey is the context key of the authenticated account.
type accountKey struct{}

// accountFrom returns the account that authenticate put in ctx.
func accountFrom(ctx context.Context) string {
	a, _ := ctx.Value(accountKey{}).(string)
	return a
}

// authenticate answers 401 to requests without a bearer token, and puts the
// account of the others in their context. For the demo the token is the
// account's name; a real service verifies the token and takes the account
// from it. It runs before the idempotency middleware, whose keys are
// scoped by this account.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if token = strings.TrimSpace(token); !ok || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orders"`)
			idemhttp.WriteProblem(w, idemhttp.Problem{Status: http.StatusUnauthorized, Title: "Unauthenticated",
				Detail: `Send "Authorization: Bearer <account>".`})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accountKey{}, token)))
	})
}
