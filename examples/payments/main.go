// Command payments charges payment requests from a message broker
// effectively once with idem: duplicates from producer retries and broker
// redeliveries are acked without a second charge, and malformed requests
// are dead-lettered.
//
//	go run ./payments --broker nats://127.0.0.1:4222                  # NATS JetStream (nats-server -js)
//	go run ./payments --broker amqp://guest:guest@127.0.0.1:5672/     # RabbitMQ
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	broker := flag.String("broker", "nats://127.0.0.1:4222", "the broker's URL: nats://host:port, or amqp://user:password@host:port/vhost")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case strings.HasPrefix(*broker, "nats://"), strings.HasPrefix(*broker, "tls://"):
		err = runNATS(ctx, *broker, os.Stdout, flag.Args())
	case strings.HasPrefix(*broker, "amqp://"), strings.HasPrefix(*broker, "amqps://"):
		err = runAMQP(ctx, *broker, os.Stdout, flag.Args())
	default:
		err = fmt.Errorf("payments: --broker %q: not a nats:// or amqp:// URL", *broker)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
