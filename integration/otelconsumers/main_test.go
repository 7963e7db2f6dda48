package otelconsumers_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/idemtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// telemetry is an idemotel.Telemetry whose metrics a test reads back.
type telemetry struct {
	*idemotel.Telemetry
	reader *sdkmetric.ManualReader
}

func newTelemetry(t *testing.T) telemetry {
	t.Helper()
	r := sdkmetric.NewManualReader()
	tel, err := idemotel.New(idemotel.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))})
	if err != nil {
		t.Fatal(err)
	}
	return telemetry{tel, r}
}

// metrics returns each instrument's points by their attributes, written
// "key=value,…" sorted by key: counters' sums, gauges' values.
func (tel telemetry) metrics(t *testing.T) map[string]map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = map[string]int64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name][p.Attributes.Encoded(attribute.DefaultEncoder())] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name][p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Value
				}
			}
		}
	}
	return out
}

// newGuard returns a Guard over a memstore of the test's own that reports
// to tel.
func newGuard(t *testing.T, tel telemetry, namespace string) *idem.Guard {
	t.Helper()
	return idemtest.Guard(t, idemtest.MemStore(t), idem.Config{Namespace: namespace, Lease: time.Minute, Observer: tel.Observe})
}

// activities counts the messages of the activities a consumer reported
// (the events, for kinds without messages), by kind, and keeps the largest
// lag seen.
type activities struct {
	mu     sync.Mutex
	kinds  map[consumer.ActivityKind]int
	maxLag int64
}

func (a *activities) add(x consumer.Activity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.kinds == nil {
		a.kinds = map[consumer.ActivityKind]int{}
	}
	a.kinds[x.Kind] += max(x.Messages, 1) // messages, or events of kinds without
	if x.LagKnown {
		a.maxLag = max(a.maxLag, x.Lag)
	}
}

func (a *activities) count(k consumer.ActivityKind) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.kinds[k]
}

// attrs writes "key=value" pairs as Encoded does: sorted, comma-separated.
func attrs(kv ...string) string {
	kvs := make([]attribute.KeyValue, 0, len(kv))
	for _, p := range kv {
		k, v, _ := strings.Cut(p, "=")
		kvs = append(kvs, attribute.String(k, v))
	}
	s := attribute.NewSet(kvs...)
	return s.Encoded(attribute.DefaultEncoder())
}
