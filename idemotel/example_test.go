package idemotel_test

import (
	"context"
	"fmt"
	"log"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/memstore"
)

func Example() {
	// A program exports through its MeterProvider (Prometheus, OTLP);
	// this one reads the metrics back in memory.
	reader := sdkmetric.NewManualReader()
	tel, err := idemotel.New(idemotel.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		log.Fatal(err)
	}
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	g, err := idem.New(store, idem.Config{Namespace: "payments", Observer: tel.Observe})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	charge := func(context.Context) ([]byte, error) { return []byte("charged"), nil }
	ctx := context.Background()
	g.Do(ctx, "order-7", nil, charge)
	g.Do(ctx, "order-7", nil, charge) // a duplicate: replayed, not charged again

	// A consumer's observer (idemkafka.WithObserver, …) reports through
	// ConsumerObserver; here, the activity of one Kafka batch by hand.
	tel.ObserveConsumer(ctx, consumer.Activity{Kind: consumer.ActivityProcessed, System: "kafka", Destination: "orders",
		Group: "billing", Partition: "0", Messages: 2, Replayed: 1, Lag: 40, LagKnown: true})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				fmt.Println(m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value)
			}
		case metricdata.Gauge[int64]:
			for _, p := range d.DataPoints {
				fmt.Println(m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value)
			}
		}
	}
	// Unordered output:
	// idem.claims idem.namespace=payments,idem.outcome=acquired 1
	// idem.claims idem.namespace=payments,idem.outcome=replayed 1
	// idem.consumer.messages idem.consumer.outcome=processed,messaging.consumer.group.name=billing,messaging.destination.name=orders,messaging.system=kafka 1
	// idem.consumer.messages idem.consumer.outcome=replayed,messaging.consumer.group.name=billing,messaging.destination.name=orders,messaging.system=kafka 1
	// idem.consumer.lag messaging.consumer.group.name=billing,messaging.destination.name=orders,messaging.destination.partition.id=0,messaging.system=kafka 40
}
