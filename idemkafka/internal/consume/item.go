package consume

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/internal/chassis"
)

// Item is a record with its key and scope, as a [Processor] gets it.
type Item struct {
	Rec   *kgo.Record
	Scope string
	Key   string
	// Payload is what the Guard fingerprints (keyed records only).
	Payload []byte
	// KeyOK: the record carries a usable key, and runs guarded. Otherwise
	// it runs unguarded when Unguarded (it has no key, and
	// WithUnkeyedUnguarded), and is poison when not ([Partition.Settle]
	// with [Partition.Unkeyed]'s verdict).
	KeyOK     bool
	Unguarded bool
	keyErr    error // why the record's key cannot be used; nil: it has none
}

// item returns r with its key (the chassis's Key), scope and payload.
func (o *Options) item(r *kgo.Record) Item {
	scope, k, payload, err := o.Read(r)
	it := Item{Rec: r, Scope: scope, Key: k, Payload: payload, KeyOK: err == nil && k != "", keyErr: err}
	if !it.KeyOK {
		it.Unguarded = err == nil && o.UnkeyedUnguarded()
	}
	return it
}

// ErrDraining is the error of a record whose handler was not started
// because the consumer is shutting down: not an attempt (it wraps
// context.Canceled), the next owner of the partition handles the record.
var ErrDraining = fmt.Errorf("not started: the consumer is shutting down: %w", context.Canceled)

// Run runs h, a handler of the record of it, with the context a handler
// gets: ctx's cancellation and values, then the values of the record's own
// context (where a kgo hook such as kotel put its span) and the record's
// trace headers (consumer.TraceFrom). A panic is the handler's
// *consumer.PanicError, logged.
func (p *Partition) Run(ctx context.Context, it Item, h func(ctx context.Context) error) error {
	r := it.Rec
	trace := chassis.Trace(func(name string) string {
		for _, h := range r.Headers {
			if strings.EqualFold(h.Key, name) {
				return string(h.Value)
			}
		}
		return ""
	})
	return p.c.o.Call(ctx, r.Context, trace, h, func() []slog.Attr { return append(recordAttrs(r), slog.String("key", it.Key)) })
}
