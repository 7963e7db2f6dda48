package chassis

import (
	"context"
	"time"

	"github.com/idemgo/idem/consumer"
)

// Trace returns the trace context among a message's headers, read with
// header (the values of a header by name, matched without regard to case
// where the broker's names are not case-sensitive).
func Trace(header func(name string) string) consumer.TraceCarrier {
	var c consumer.TraceCarrier
	for _, name := range consumer.TraceHeaders {
		if v := header(name); v != "" {
			if c == nil {
				c = consumer.TraceCarrier{}
			}
			c[name] = v
		}
	}
	return c
}

// merged is a context whose values are those of its Context, else those of
// values; its deadline and cancellation are its Context's alone.
type merged struct {
	context.Context
	values context.Context
}

func (m merged) Value(key any) any {
	if v := m.Context.Value(key); v != nil {
		return v
	}
	return m.values.Value(key)
}

// Deadline is the Context's.
func (m merged) Deadline() (time.Time, bool) { return m.Context.Deadline() }
