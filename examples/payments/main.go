// Command payments charges orders from a message broker effectively once
// with idem: duplicates from producer retries and broker redeliveries are
// acknowledged without a second charge, and malformed events are
// dead-lettered. It runs with one command and nothing installed:
//
//	go run ./payments                                    # Kafka, an in-process cluster: publish orders with duplicates, charge each once
//	go run ./payments --brokers localhost:9092           # consume a real Kafka cluster until Ctrl-C
//	go run ./payments --brokers localhost:9092 produce   # publish orders with duplicates to it
//	go run ./payments --broker nats://127.0.0.1:4222     # NATS JetStream (nats-server -js): two replicas charge each payment once
//	go run ./payments --broker amqp://guest:guest@127.0.0.1:5672/   # RabbitMQ
//	go run ./payments --broker sqs://127.0.0.1:4566      # Amazon SQS (an SQS-compatible server: moto_server -p 4566)
//
// --broker chooses the broker: kafka (the default), a nats:// URL, an
// amqp:// URL or an sqs:// endpoint; each lives in a file of its own. See
// README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// options are the command's flags and its mode.
type options struct {
	broker  string   // "kafka", a nats:// URL or an amqp:// URL
	brokers string   // Kafka: comma-separated addresses; "" for an in-process cluster
	mode    string   // Kafka: "" (in-process: produce, then consume), "consume" or "produce"
	args    []string // NATS and RabbitMQ: their own flags, after the common ones
	store   string   // where idempotency records live: mem:// or redis://host:port/db
	topic   string   // the OrderCreated topic
	group   string   // the consumer group
	orders  int      // produce: how many orders
	dupRate float64  // produce: the chance that an order is published again
	seed    uint64   // produce: the seed of amounts and duplicates
}

func isNATS(broker string) bool {
	return strings.HasPrefix(broker, "nats://") || strings.HasPrefix(broker, "tls://")
}

func isAMQP(broker string) bool {
	return strings.HasPrefix(broker, "amqp://") || strings.HasPrefix(broker, "amqps://")
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.broker, "broker", "kafka", "the broker: kafka, a NATS JetStream URL nats://host:port, a RabbitMQ URL amqp://user:password@host:port/vhost, or an SQS endpoint sqs://host:port")
	fs.StringVar(&o.brokers, "brokers", "", "Kafka: broker addresses, comma-separated (default: an in-process cluster, for a try without installing anything)")
	fs.StringVar(&o.store, "store", "mem://", "Kafka: where idempotency records live: mem:// (this process) or redis://host:port/db (shared by every consumer)")
	fs.StringVar(&o.topic, "topic", "orders", "Kafka: the topic of OrderCreated events")
	fs.StringVar(&o.group, "group", "payments", "Kafka: the consumer group")
	fs.IntVar(&o.orders, "orders", 20, "Kafka, produce: how many orders to publish")
	fs.Float64Var(&o.dupRate, "dup-rate", 0.3, "Kafka, produce: the chance that an order is published a second time, in [0, 1]")
	fs.Uint64Var(&o.seed, "seed", 1, "Kafka, produce: the seed of the orders' amounts and duplicates")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: payments [flags] [consume|produce]
       payments --broker nats://host:port [-- NATS flags: -payments N -resend N]

Charges each order once. With Kafka and no --brokers it starts an
in-process cluster, publishes --orders orders with duplicates, charges them
and exits. With --brokers it consumes until interrupted, or, given
"produce", publishes orders with duplicates.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if isNATS(o.broker) || isAMQP(o.broker) || isSQS(o.broker) {
		o.args = fs.Args()
		return o, nil
	}
	switch fs.NArg() {
	case 0:
		if o.brokers != "" {
			o.mode = "consume"
		}
	case 1:
		o.mode = fs.Arg(0)
	default:
		return o, fmt.Errorf("payments: one mode at most, got %q", fs.Args())
	}
	switch {
	case o.broker != "kafka":
		return o, fmt.Errorf("payments: --broker %q: kafka, a nats:// URL, an amqp:// URL or an sqs:// endpoint", o.broker)
	case o.mode != "" && o.mode != "consume" && o.mode != "produce":
		return o, fmt.Errorf("payments: mode %q: consume or produce", o.mode)
	case o.mode != "" && o.brokers == "":
		return o, fmt.Errorf("payments: %s needs --brokers (without them, the in-process cluster does both)", o.mode)
	case o.orders < 1:
		return o, fmt.Errorf("payments: --orders %d: at least 1", o.orders)
	case !(o.dupRate >= 0 && o.dupRate <= 1):
		return o, fmt.Errorf("payments: --dup-rate %v: in [0, 1]", o.dupRate)
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second signal kills at once
	switch {
	case isNATS(o.broker):
		err = runNATS(ctx, o.broker, os.Stdout, o.args)
	case isAMQP(o.broker):
		err = runAMQP(ctx, o.broker, os.Stdout, o.args)
	case isSQS(o.broker):
		err = runSQS(ctx, o.broker, os.Stdout, o.args)
	default:
		err = runKafka(ctx, o, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
