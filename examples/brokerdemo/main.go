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

	"github.com/idemgo/idem/internal/cli"
	"github.com/idemgo/idem/internal/demo"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
	_ "github.com/idemgo/idem/storeurl/dynamourl"
	_ "github.com/idemgo/idem/storeurl/pgurl"
	_ "github.com/idemgo/idem/storeurl/redisurl"
	_ "github.com/idemgo/idem/storeurl/sqliteurl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	ue, isUsage := errors.AsType[*cli.UsageError](err)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case isUsage:
		if !ue.Printed { // else the flag package printed it, with the flags
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// options are the demo's flags and the broker's.
type options struct {
	demo.Options
	broker  string   // kafka, or a nats:// or amqp:// URL
	brokers []string // with kafka: the seed brokers
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var brokers string
	fs := flag.NewFlagSet("brokerdemo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.Flags(fs, "the idem store's URL, as idem demo takes it: mem://, redis://…, postgres://…, dynamodb://… or sqlite://… (idem help demo lists them)")
	fs.StringVar(&o.broker, "broker", "", "required: the broker the stream goes through: kafka for Kafka consumer groups (with --brokers), nats://host:port for NATS JetStream, amqp://user:password@host:port/vhost for RabbitMQ")
	fs.StringVar(&brokers, "brokers", "", "with --broker kafka, required: the seed brokers host:port,... of a Kafka cluster to run on; the demo creates topics and consumer groups of its own there (unique names) and deletes the topics at the end")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: go run ./brokerdemo --broker kafka|nats://…|amqp://… [flags]\n\n"+demo.About+`
The stream goes through a real broker: idem demo's, with the clients
that idem's command does not link.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags("idem", fs, args); err != nil {
		return o, err
	}
	for _, b := range strings.Split(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.brokers = append(o.brokers, b)
		}
	}
	switch {
	case brokers != "" && o.broker != "kafka":
		return o, cli.Usagef("idem: --brokers %q: only with --broker kafka", brokers)
	case o.broker != "kafka" && !strings.HasPrefix(o.broker, "nats://") && !strings.HasPrefix(o.broker, "amqp://") && !strings.HasPrefix(o.broker, "amqps://"):
		return o, cli.Usagef("idem: --broker %q: kafka, or a nats:// or amqp:// URL", o.broker)
	case o.broker == "kafka" && len(o.brokers) == 0:
		return o, cli.Usagef("idem: demo: --broker kafka needs --brokers host:port,… (a Kafka cluster the demo creates topics on); go run ./payments runs a consumer on an in-process cluster")
	}
	if err := o.Check(fs); err != nil {
		return o, &cli.UsageError{Err: err}
	}
	o.StoreName = storeurl.Redact(o.Store)
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	_, _, err = runDemo(ctx, o, stdout, stderr)
	return err
}

// runDemo opens the store and runs the demo through o's broker.
func runDemo(ctx context.Context, o options, stdout, stderr io.Writer) (naive, guarded demo.Report, err error) {
	store, closeStore, err := openStore(ctx, o.Store)
	if err != nil {
		return naive, guarded, err
	}
	defer func() { err = errors.Join(err, closeStore()) }()
	switch {
	case o.broker == "kafka":
		return runKafka(ctx, o.Options, o.brokers, store, stdout, stderr)
	case strings.HasPrefix(o.broker, "nats://"):
		t := demo.Transport{Run: natsRunStream(o.broker), Via: ", broker " + o.broker}
		return demo.Run(ctx, o.Options, store, t, stdout, stderr)
	default:
		t := demo.Transport{Run: amqpRunStream(o.broker), Via: ", broker " + storeurl.Redact(o.broker),
			Back: "as soon as its connection closes"} // RabbitMQ requeues at once
		return demo.Run(ctx, o.Options, store, t, stdout, stderr)
	}
}

// openStore opens the store of rawURL, creating its table where it has
// one. A URL storeurl cannot use is a *cli.UsageError.
func openStore(ctx context.Context, rawURL string) (storage.Store, func() error, error) {
	s, closeStore, err := storeurl.Open(ctx, rawURL, storeurl.Migrate())
	if ue, ok := errors.AsType[*storeurl.URLError](err); ok {
		return nil, nil, cli.Usagef("idem: --store %s: %v", ue.URL, ue.Err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("idem: %w", err)
	}
	return s, closeStore, nil
}
