package idemotel_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgo/idem/coalesce"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

// heldStore holds its first Claim until release is closed, so that the
// claims made meanwhile queue into one batch.
type heldStore struct {
	*memstore.Store
	release chan struct{}
	first   bool
}

func (s *heldStore) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if !s.first {
		s.first = true
		<-s.release
	}
	return s.Store.Claim(ctx, a)
}

// A batch of coalesced claims is one span, linked to the span of each of
// its callers, and the store call runs under it.
func TestCoalesceHookLinksCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		tel, err := idemotel.New(idemotel.Config{TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		held := &heldStore{Store: mem, release: make(chan struct{})}
		s := coalesce.New(held, coalesce.WithBatchHook(tel.CoalesceHook()))
		claim := func(ctx context.Context, key string) {
			if _, err := s.Claim(ctx, storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Hour}); err != nil {
				t.Error(err)
			}
		}
		done := make(chan struct{})
		go func() { claim(context.Background(), "first"); close(done) }()
		synctest.Wait()
		var callers []trace.SpanContext
		for _, k := range []string{"a", "b"} {
			ctx, span := tp.Tracer("test").Start(context.Background(), "handle "+k)
			callers = append(callers, span.SpanContext())
			go func() { defer span.End(); claim(ctx, k) }()
		}
		synctest.Wait()
		close(held.release)
		<-done
		synctest.Wait()

		var batch sdktrace.ReadOnlySpan
		for _, sp := range spans.Ended() {
			if sp.Name() == "idem.coalesce.ClaimBatch" {
				if batch != nil {
					t.Fatal("two batch spans, want one")
				}
				batch = sp
			}
		}
		if batch == nil {
			t.Fatal("no idem.coalesce.ClaimBatch span")
		}
		var linked []trace.SpanContext
		for _, l := range batch.Links() {
			linked = append(linked, l.SpanContext)
		}
		has := func(sc trace.SpanContext) bool {
			return slices.ContainsFunc(linked, func(l trace.SpanContext) bool { return l.Equal(sc) })
		}
		if len(linked) != 2 || !has(callers[0]) || !has(callers[1]) {
			t.Fatalf("the batch span links %v, want the callers' spans %v", linked, callers)
		}
		for _, a := range batch.Attributes() {
			if a.Key == "idem.batch.size" && a.Value.AsInt64() != 2 {
				t.Fatalf("idem.batch.size %d, want 2", a.Value.AsInt64())
			}
		}
	})
}
