package otelrelay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/idemotel/otelrelay"
	"github.com/idemgo/idem/outbox"
)

// point is one data point: its attributes' values by key.
type point struct {
	attrs map[attribute.Key]string
	value float64
}

// collect returns the data points of each instrument by name: counters'
// sums, histograms' counts, gauges' values.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string][]point{}
	attrs := func(s attribute.Set) map[attribute.Key]string {
		m := map[attribute.Key]string{}
		for _, kv := range s.ToSlice() {
			m[kv.Key] = kv.Value.Emit()
		}
		return m
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelrelay.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs(p.Attributes), float64(p.Value)})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs(p.Attributes), float64(p.Count)})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs(p.Attributes), float64(p.Value)})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs(p.Attributes), p.Value})
				}
			}
		}
	}
	return out
}

// value returns the value of the point of name whose attributes are kv
// (key, value, …), and whether there is one.
func value(points map[string][]point, name string, kv ...string) (float64, bool) {
	for _, p := range points[name] {
		if len(p.attrs) != len(kv)/2 {
			continue
		}
		match := true
		for i := 0; i+1 < len(kv); i += 2 {
			match = match && p.attrs[attribute.Key(kv[i])] == kv[i+1]
		}
		if match {
			return p.value, true
		}
	}
	return 0, false
}

func TestRelayMetrics(t *testing.T) {
	r := sdkmetric.NewManualReader()
	m, err := otelrelay.New(idemotel.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const table = "idem_outbox"
	m.Observe(ctx, outbox.Event{Op: outbox.OpPublish, Table: table, Sent: 7, Failed: 3, Unavailable: 1, Duration: 20 * time.Millisecond, Err: errors.New("refused")})
	m.Observe(ctx, outbox.Event{Op: outbox.OpPublish, Table: table, Sent: 2, Duration: time.Millisecond})
	m.Observe(ctx, outbox.Event{Op: outbox.OpDead, Table: table, Dead: 2})
	m.Observe(ctx, outbox.Event{Op: outbox.OpLag, Table: table, Pending: 40, OldestPending: 90 * time.Second, Dead: 5})
	m.Observe(ctx, outbox.Event{Op: outbox.OpLag, Table: table, Pending: 12, OldestPending: 3 * time.Second, Dead: 2})
	m.Observe(ctx, outbox.Event{Op: outbox.OpLag, Table: "billing.outbox", Pending: 1, OldestPending: time.Second})
	m.Observe(ctx, outbox.Event{Op: outbox.OpBackoff, Table: table, Duration: time.Second, Err: errors.New("down")})

	got := collect(t, r)
	for _, c := range []struct {
		name string
		kv   []string
		want float64
	}{
		{"idem.outbox.messages", []string{"idem.outbox.table", table, "idem.outbox.outcome", "published"}, 9},
		{"idem.outbox.messages", []string{"idem.outbox.table", table, "idem.outbox.outcome", "refused"}, 2},
		{"idem.outbox.messages", []string{"idem.outbox.table", table, "idem.outbox.outcome", "unavailable"}, 1},
		{"idem.outbox.messages", []string{"idem.outbox.table", table, "idem.outbox.outcome", "dead"}, 2},
		{"idem.outbox.publish.duration", []string{"idem.outbox.table", table}, 2},
		// The gauges hold the last sample of each table.
		{"idem.outbox.pending", []string{"idem.outbox.table", table}, 12},
		{"idem.outbox.lag", []string{"idem.outbox.table", table}, 3},
		{"idem.outbox.dead", []string{"idem.outbox.table", table}, 2},
		{"idem.outbox.pending", []string{"idem.outbox.table", "billing.outbox"}, 1},
		{"idem.outbox.dead", []string{"idem.outbox.table", "billing.outbox"}, 0},
	} {
		if v, ok := value(got, c.name, c.kv...); !ok || v != c.want {
			t.Errorf("%s%v = %v (found %t), want %v; all: %v", c.name, c.kv, v, ok, c.want, got[c.name])
		}
	}
	if n := len(got["idem.outbox.messages"]); n != 4 {
		t.Errorf("%d series of idem.outbox.messages, want 4: %v", n, got["idem.outbox.messages"])
	}
}
