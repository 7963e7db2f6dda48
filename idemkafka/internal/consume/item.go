package consume

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Item is a record with its key and scope, as a [Processor] gets it.
type Item struct {
	Rec   *kgo.Record
	Scope string
	Key   string
	// KeyOK: the record carries a usable key. Otherwise KeyErr says why
	// its key cannot be used (a *consumer.KeyError), or is nil: it has
	// none.
	KeyOK  bool
	KeyErr error
}

// Item returns r with its key (the chassis's Key) and scope.
func (o *Options) Item(r *kgo.Record) Item {
	k, err := o.Key(r)
	return Item{Rec: r, Scope: o.Scope(r), Key: k, KeyOK: err == nil && k != "", KeyErr: err}
}

// ErrDraining is the error of a record whose handler was not started
// because the consumer is shutting down: not an attempt (it wraps
// context.Canceled), the next owner of the partition handles the record.
var ErrDraining = fmt.Errorf("not started: the consumer is shutting down: %w", context.Canceled)
