package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgo/idem/memstore"
)

// TestMetricsScraped: after real requests (an order, its retry, a key
// reused with another body), GET /metrics answers the Guard's counters in
// Prometheus' text format, and no label holds a key or an account.
func TestMetricsScraped(t *testing.T) {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	a := newTestAPI(t, s)
	body := `{"customer":"Ada","amount_cents":4200}`
	a.post("alice", "order-key-1", body)
	a.post("alice", "order-key-1", body)
	a.post("alice", "order-key-1", `{"customer":"Ada","amount_cents":1}`)

	resp, err := a.srv.Client().Get(a.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
	}
	text := string(b)
	for _, want := range []string{
		`idem_claims_total{idem_namespace="orders",idem_outcome="acquired",`,
		`idem_claims_total{idem_namespace="orders",idem_outcome="key_reused",`,
		`idem_run_duration_seconds_count{idem_namespace="orders",`,
		`idem_store_duration_seconds_bucket{idem_namespace="orders",idem_operation="complete",`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(text, `idem_outcome="replayed"`) {
		t.Errorf("/metrics counts no replayed claim")
	}
	if strings.Contains(text, "order-key-1") || strings.Contains(text, "alice") {
		t.Errorf("/metrics names a key or an account")
	}
	if t.Failed() {
		t.Log(text)
	}
}
