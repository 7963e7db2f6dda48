package idemotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// CoalesceHook returns the batch hook of
// [github.com/idemgo/idem/coalesce.WithBatchHook] that traces the batches a
// coalescing store sends: a span "idem.coalesce.ClaimBatch" (or
// "idem.coalesce.CompleteBatch") per batch, with a link to the span of
// each caller in it and the batch's size as idem.batch.size. The store
// call runs under it, so a store client's own spans are its children; the
// store's error ends it with an error status.
//
//	g, err := idem.New(coalesce.New(store, coalesce.WithBatchHook(tel.CoalesceHook())), cfg)
func (t *Telemetry) CoalesceHook() func(ctx context.Context, call string, callers []context.Context) (context.Context, func(error)) {
	return func(ctx context.Context, call string, callers []context.Context) (context.Context, func(error)) {
		links := make([]trace.Link, 0, len(callers))
		for _, c := range callers {
			if sc := trace.SpanContextFromContext(c); sc.IsValid() {
				links = append(links, trace.Link{SpanContext: sc})
			}
		}
		ctx, span := t.tracer.Start(ctx, "idem.coalesce."+call, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithLinks(links...), trace.WithAttributes(attribute.Int("idem.batch.size", len(callers))))
		return ctx, func(err error) {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
	}
}
