package consume

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/adapter"
	"github.com/idemgo/idem/internal/chassis"
)

// Defaults of [Options].
const (
	DefaultKeyHeader      = "idempotency-key"
	DefaultMaxBatch       = 500
	DefaultCommitInterval = time.Second
)

// Options configure a [Consumer]: the options every idem consumer has
// (chassis.Options), and Kafka's, which idemkafka's Option functions set.
type Options struct {
	chassis.Options[*kgo.Record]

	DeadLetterTopic  string      // WithDeadLetter's topic
	DeadLetterClient *kgo.Client // default: the consuming client

	MaxBatch       int           // records handed to the Processor at once; default DefaultMaxBatch
	CommitInterval time.Duration // between Kafka commits; default DefaultCommitInterval

	Observer func(ctx context.Context, e Event) // default: none
}

// build applies opts to o for the adapter pkg and checks them
// (chassis.Build: the scope and poison decisions among them), over the
// Guard g, or, when g is nil, over an executor whose configuration is cfg;
// then it fills in Kafka's defaults.
func build[F ~func(*Options)](o *Options, pkg string, g *idem.Guard, cfg idem.Config, opts []F) error {
	b := chassis.Broker[*kgo.Record]{
		Names:            adapter.Names{Pkg: pkg, Request: "*kgo.Record"},
		KeyHeader:        DefaultKeyHeader,
		Header:           headerValues,
		Body:             func(r *kgo.Record) []byte { return r.Value },
		DeadLetterOption: "WithDeadLetter(topic)",
	}
	if err := chassis.Build(o, &o.Options, b, g, cfg, opts); err != nil {
		return err
	}
	o.MaxBatch = cmp.Or(o.MaxBatch, DefaultMaxBatch)
	o.CommitInterval = cmp.Or(o.CommitInterval, DefaultCommitInterval)
	return nil
}

// headerValues returns the values of r's headers called name, in order.
func headerValues(r *kgo.Record, name string) []string {
	var values []string
	for _, h := range r.Headers {
		if h.Key == name {
			values = append(values, string(h.Value))
		}
	}
	return values
}

// headers returns r's headers as the chassis sees them.
func headers(r *kgo.Record) []chassis.Header {
	hs := make([]chassis.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = chassis.Header{Name: h.Key, Value: h.Value}
	}
	return hs
}

// recordAttrs returns the log attributes that find r: its topic, partition and
// offset.
func recordAttrs(r *kgo.Record) []slog.Attr {
	return []slog.Attr{slog.String("topic", r.Topic), slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset)}
}
