// Command checkout is a checkout that charges every order exactly once,
// end to end, over at-least-once parts: an HTTP API whose clients retry,
// a transactional outbox whose relay may publish twice, a NATS JetStream
// stream that redelivers, and a consumer that may die mid-charge.
//
//	POST /orders ──idemhttp──▶ TxGuard.DoTxScoped: order + outbox row, one transaction
//	outbox relay ──natspub──▶ JetStream stream (Nats-Msg-Id = the message ID)
//	idemnats consumer ──Guard(message ID)──▶ TxGuard.DoScoped: charge row + its record, one transaction; outcome, then ack
//
// One command runs all three on this machine's PostgreSQL and NATS:
//
//	go run ./checkout
//
// -role runs one part only, to run several of each. See README.md.
package main

import (
	"cmp"
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

	"golang.org/x/sync/errgroup"
)

func main() {
	var cfg config
	addr := flag.String("addr", "127.0.0.1:8080", "the API's listen address (roles all and api)")
	role := flag.String("role", "all", "what to run: all, api, relay or consumer")
	flag.StringVar(&cfg.postgres, "postgres", cmp.Or(os.Getenv("IDEM_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL")
	flag.StringVar(&cfg.nats, "nats", cmp.Or(os.Getenv("IDEM_NATS_URL"), "nats://127.0.0.1:4222"), "NATS URL")
	flag.StringVar(&cfg.schema, "schema", "checkout", "PostgreSQL schema of the tables (created if missing)")
	flag.StringVar(&cfg.stream, "stream", "CHECKOUT", "JetStream stream of the charge messages (created if missing)")
	flag.StringVar(&cfg.subject, "subject", "checkout.charges", "subject of the charge messages")
	flag.DurationVar(&cfg.ackWait, "ack-wait", 30*time.Second, "how long NATS waits for the consumer's ack before it delivers again")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(flag.CommandLine.Output(), "checkout: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second signal kills at once
	if err := run(ctx, cfg, *role, *addr, log, hooks{}); err != nil {
		log.Error("checkout: " + err.Error())
		os.Exit(1)
	}
}

// run runs role until ctx ends: all, api (on addr), relay or consumer.
func run(ctx context.Context, cfg config, role, addr string, log *slog.Logger, h hooks) error {
	switch role {
	case "all", "api", "relay", "consumer":
	default:
		return fmt.Errorf("-role %q: want all, api, relay or consumer", role)
	}
	c, err := open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer c.close()
	g, ctx := errgroup.WithContext(ctx)
	if role == "all" || role == "api" {
		g.Go(func() error { return c.serve(ctx, addr) })
	}
	if role == "all" || role == "relay" {
		g.Go(func() error { return c.relay(ctx, h) })
	}
	if role == "all" || role == "consumer" {
		g.Go(func() error { return c.consume(ctx, h) })
	}
	return g.Wait()
}

// serve serves the API on addr until ctx ends, then shuts down gracefully:
// requests in flight finish, and their outcomes are stored.
func (c *checkout) serve(ctx context.Context, addr string) error {
	h, closeAPI, err := c.api()
	if err != nil {
		return err
	}
	defer closeAPI()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	// ReadTimeout too: the middleware reads a POST's body before the
	// handler runs, and a slow client must not hold it open for ever.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute}
	shutdown := make(chan error, 1)
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		shutdown <- srv.Shutdown(sctx)
	})
	c.log.Info("checkout: listening", "url", "http://"+l.Addr().String())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return <-shutdown
}
