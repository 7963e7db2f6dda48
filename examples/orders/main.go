// Command orders is a small order API made idempotent with idemhttp: a
// client that retries POST /orders with the same Idempotency-Key gets the
// first response back, byte for byte, instead of a second order.
//
//	go run ./orders                                  # records in memory
//	go run ./orders -store redis://127.0.0.1:6379/0  # records in Redis
//	go run ./orders -store 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//	go run ./orders -store dynamodb://127.0.0.1:8000/idem_records  # dynalite; dynamodb:///idem_records on AWS
//
// It shows the middleware's setup: keys required on POST, scoped by the
// authenticated account so that two accounts' keys never meet, a wait for
// a concurrent duplicate's outcome, the store chosen at start-up, and the
// Guard's metrics on GET /metrics for Prometheus. See README.md for a
// session with curl.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
	_ "github.com/idemgo/idem/storeurl/dynamourl" // the schemes -store takes, besides mem://
	_ "github.com/idemgo/idem/storeurl/pgurl"
	_ "github.com/idemgo/idem/storeurl/redisurl"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	store := flag.String("store", "mem://", "where idempotency records live: mem://, redis://host:port/db, postgres://user@host:port/db or dynamodb://host:port/table")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(flag.CommandLine.Output(), "orders: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, a second one kills at once.
	context.AfterFunc(ctx, stop)
	if err := run(ctx, *addr, *store, log); err != nil {
		log.Error("orders: " + err.Error())
		os.Exit(1)
	}
}

// run serves the API on addr with its records in the store at storeURL
// until ctx is cancelled, then shuts down gracefully.
func run(ctx context.Context, addr, storeURL string, log *slog.Logger) error {
	store, closeStore, err := openStore(ctx, storeURL)
	if err != nil {
		return err
	}
	defer closeStore()
	h, _, closeAPI, err := newAPI(store, log)
	if err != nil {
		return err
	}
	defer closeAPI()

	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := newServer(h)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	log.Info("orders: listening", "url", "http://"+l.Addr().String(), "store", storeurl.Redact(storeURL))

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("orders: shutting down")
	// In-flight requests finish, and their outcomes are stored, before the
	// store closes.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newServer returns the HTTP server of h, with timeouts a server that
// reads request bodies needs. The middleware reads a POST's whole body
// (to fingerprint it) before the handler runs, into a buffer that grows as
// bytes arrive: without ReadHeaderTimeout and ReadTimeout a client that
// sends slowly, or announces a body and never sends it, holds a connection,
// a goroutine and that buffer for as long as it likes.
func newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler: h,
		// The request line and header must arrive within 5s.
		ReadHeaderTimeout: 5 * time.Second,
		// The whole request, body included (at most 64 KiB here), within
		// 15s of the connection's first byte.
		ReadTimeout: 15 * time.Second,
		// An idle keep-alive connection is closed after a minute.
		IdleTimeout: time.Minute,
		// WriteTimeout stays unset: a response is written while the
		// handler runs, and a handler waiting on a concurrent duplicate
		// (the Guard's Wait, 10s) must not be cut off.
	}
}

// newAPI returns the order API over store, its POST behind the idempotency
// middleware, with the orders it keeps and the function that stops its
// Guard. GET /metrics serves the Guard's metrics (idemotel's, through
// OpenTelemetry's Prometheus exporter) for a Prometheus to scrape.
func newAPI(store storage.Store, log *slog.Logger) (http.Handler, *orders, func(), error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, nil, err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	tel, err := idemotel.New(idemotel.Config{MeterProvider: meters})
	if err != nil {
		return nil, nil, nil, err
	}
	g, err := idem.New(store, idem.Config{
		Namespace: "orders",
		// A retry that arrives while the first request still runs waits up
		// to 10s for its response, and gets 409 with Retry-After only then.
		Wait:     10 * time.Second,
		Logger:   log,
		Observer: tel.Observe,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	mw, err := idemhttp.New(g,
		// POST /orders without a key is refused with 400: every client
		// must be able to retry safely.
		idemhttp.WithRequired(),
		// Keys belong to the account: Alice's key "1" and Bob's key "1"
		// are two records, and neither is ever replayed the other's order.
		idemhttp.WithScope(func(r *http.Request) string { return accountFrom(r.Context()) }),
		idemhttp.WithMaxBodyBytes(64<<10),
	)
	if err != nil {
		g.Close()
		return nil, nil, nil, err
	}
	o := newOrders()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", o.routes(mw))
	return mux, o, func() {
		g.Close()
		meters.Shutdown(context.Background())
	}, nil
}

// openStore opens the store named by rawURL with storeurl.Open, its table
// created or upgraded first (pgstore.Migrate and dynamostore.CreateTable
// are idempotent), and returns it with the function that releases it. A
// PostgreSQL store also gets a reaper that deletes its expired records;
// Redis, memstore and DynamoDB (its TTL) expire records themselves.
func openStore(ctx context.Context, rawURL string) (storage.Store, func(), error) {
	s, closeStore, err := storeurl.Open(ctx, rawURL, storeurl.Migrate())
	if err != nil {
		return nil, nil, fmt.Errorf("-store: %w", err)
	}
	pg, ok := s.(*pgstore.Store)
	if !ok {
		return s, func() { closeStore() }, nil
	}
	reaper, err := pgstore.NewReaper(pg, pgstore.ReaperConfig{})
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return s, func() { reaper.Close(); closeStore() }, nil
}
