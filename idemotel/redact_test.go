package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/storage"
)

// talkative fails every claim with an error that names the key, as store
// errors do.
type talkative struct{ storage.Store }

func (s talkative) Claim(_ context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	return storage.Claim{}, fmt.Errorf("%w: the server said no about %q", storage.ErrStoreUnavailable, a.Key)
}

// spansOf runs one Do of key that fails in the store, through a Telemetry
// made with cfg, and returns the spans it recorded.
func spansOf(t *testing.T, cfg idemotel.Config, key string) ([]sdktrace.ReadOnlySpan, *idemotel.Telemetry) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tel, err := idemotel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := idemtest.Guard(t, talkative{idemtest.MemStore(t)}, idem.Config{Observer: tel.Observe})
	if _, err := g.DoScoped(t.Context(), "tenant-7", key, nil, func(context.Context) ([]byte, error) { return nil, nil }); !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("Do: %v, want ErrStoreUnavailable", err)
	}
	return rec.Ended(), tel
}

// spanText is everything a span exports as text: attributes, status and
// events.
func spanText(s sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	fmt.Fprintln(&b, s.Name(), s.Status().Description)
	for _, a := range s.Attributes() {
		fmt.Fprintln(&b, a.Key, a.Value.Emit())
	}
	for _, e := range s.Events() {
		fmt.Fprintln(&b, e.Name)
		for _, a := range e.Attributes {
			fmt.Fprintln(&b, a.Key, a.Value.Emit())
		}
	}
	return b.String()
}

// A span never carries the key, through the error of a store that names
// it, unless Config.RecordErrorText asks for the errors' messages.
func TestSpansDoNotNameTheKey(t *testing.T) {
	const key = "order-secret-42"
	spans, _ := spansOf(t, idemotel.Config{}, key)
	if len(spans) == 0 {
		t.Fatal("no span recorded")
	}
	for _, s := range spans {
		if text := spanText(s); strings.Contains(text, key) {
			t.Errorf("span %q names the key:\n%s", s.Name(), text)
		}
		if s.Status().Description != "store_unavailable" {
			t.Errorf("span %q status %q, want the error.type store_unavailable", s.Name(), s.Status().Description)
		}
	}
	spans, _ = spansOf(t, idemotel.Config{RecordErrorText: true}, key)
	if text := spanText(spans[0]); !strings.Contains(text, key) {
		t.Errorf("with RecordErrorText the span has no error message:\n%s", text)
	}
}

// idem.key.hash is keyed: processes that share Config.KeySecret agree on a
// key's hash, and without the secret it cannot be computed from a guessed
// key.
func TestKeyHashIsKeyed(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	spans, tel := spansOf(t, idemotel.Config{KeySecret: secret}, "order-1")
	var got string
	for _, a := range spans[0].Attributes() {
		if a.Key == "idem.key.hash" {
			got = a.Value.AsString()
		}
	}
	if want := tel.KeyHash("tenant-7", "order-1"); got != want || len(got) != 16 {
		t.Fatalf("idem.key.hash %q, want Telemetry.KeyHash's %q (16 hex digits)", got, want)
	}
	other, err := idemotel.New(idemotel.Config{KeySecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if h := other.KeyHash("tenant-7", "order-1"); h != got {
		t.Errorf("the same secret gives %q, want %q", h, got)
	}
	random, err := idemotel.New(idemotel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if h := random.KeyHash("tenant-7", "order-1"); h == got {
		t.Error("a Telemetry with its own random secret gives the same hash")
	}
	if tel.KeyHash("tenant-7", "order-1") == tel.KeyHash("tenant-", "7order-1") {
		t.Error("scope and key are not told apart")
	}
	if _, err := idemotel.New(idemotel.Config{KeySecret: []byte("short")}); err == nil || !strings.Contains(err.Error(), "KeySecret") {
		t.Errorf("New with a 5-byte secret: %v, want an error naming KeySecret", err)
	}
}
