package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/idemgo/idem/internal/cli"
	"github.com/idemgo/idem/internal/demo"
	"github.com/idemgo/idem/storeurl"
)

func init() {
	register(command{
		name:    "demo",
		summary: "a payment stream with duplicates and crashes: a naive consumer against an idem-guarded one",
		run:     runDemo,
	})
}

// parseDemoFlags parses the flags of idem demo. The broker demos moved to
// the examples module, so that this tool links no broker client: --broker
// and --brokers are still known, to say where.
func parseDemoFlags(args []string, stderr io.Writer) (demo.Options, error) {
	var o demo.Options
	var broker, brokers string
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.Flags(fs, storeUsage)
	fs.StringVar(&broker, "broker", "", "moved: "+brokerDemo)
	fs.StringVar(&brokers, "brokers", "", "moved, with --broker")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: idem demo [flags]\n\n"+demo.About+`
The stream goes through an in-process queue. For Kafka, NATS JetStream
or RabbitMQ: `+brokerDemo+`.

Flags:
`)
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if broker != "" || brokers != "" {
		return o, usageErrorf("idem: demo --broker: the broker demos moved to the examples module, so that idem links no broker client: %s", brokerDemo)
	}
	if err := o.Check(fs); err != nil {
		return o, &cli.UsageError{Err: err}
	}
	o.StoreName = storeurl.Redact(o.Store)
	return o, nil
}

// brokerDemo is the command of the broker demos.
const brokerDemo = "cd examples && go run ./brokerdemo --broker kafka --brokers host:port (or --broker nats://host:port, amqp://user:password@host:port/vhost) in idem's repository"

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	o, err := parseDemoFlags(args, stderr)
	if err != nil {
		return err
	}
	store, closeStore, err := openStore(ctx, o.Store, true)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeStore()) }()
	_, _, err = demo.Run(ctx, o, store, demo.Transport{}, stdout, stderr)
	return err
}
