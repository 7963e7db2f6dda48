package consumer_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgo/idem/consumer"
)

// A handler reads the trace context its message carried (an OpenTelemetry
// propagator's Extract takes the carrier as it is), and the reason of a
// dead letter is one of package consumer's.
func ExampleTraceFrom() {
	// What a consumer does before it runs the handler:
	ctx := consumer.WithTrace(context.Background(), consumer.TraceCarrier{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	})

	handler := func(ctx context.Context) error {
		tc := consumer.TraceFrom(ctx)
		fmt.Println("traceparent:", tc.Get("Traceparent"))
		return nil
	}
	handler(ctx)
	fmt.Println("no trace:", len(consumer.TraceFrom(context.Background())) == 0)
	// Output:
	// traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	// no trace: true
}

// A dead letter's cause can be matched by the errors of package consumer.
func ExampleKeyError() {
	err := error(&consumer.KeyError{Source: `header "idempotency-key"`, Err: errors.New("the key is empty")})
	var ke *consumer.KeyError
	fmt.Println(errors.As(err, &ke), ke.Source)
	fmt.Println(err)
	// Output:
	// true header "idempotency-key"
	// idempotency key from header "idempotency-key": the key is empty
}
