package otelconsumers_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemnats"
)

// brief is what a metric reads of an Activity.
func brief(a consumer.Activity) string {
	return fmt.Sprintf("%s %s/%s/%s/%s n=%d replayed=%d lag=%d,%t gaveUp=%t reason=%s",
		a.Kind, a.System, a.Destination, a.Group, a.Partition, a.Messages, a.Replayed, a.Lag, a.LagKnown, a.GaveUp, a.Reason)
}

// Each consumer's events, as idemotel sees them.
func TestEventActivities(t *testing.T) {
	refused := errors.New("refused")
	for _, c := range []struct {
		name string
		got  consumer.Activity
		want string
	}{
		{"kafka batch", idemkafka.Event{Kind: idemkafka.EventBatch, Topic: "orders", Partition: 3, Records: 5, Replayed: 2, Lag: 7}.Activity(),
			"processed kafka/orders//3 n=5 replayed=2 lag=7,true gaveUp=false reason="},
		{"kafka busy", idemkafka.Event{Kind: idemkafka.EventRetry, Topic: "orders", Partition: 3, Err: fmt.Errorf("key k: %w", idem.ErrInProgress)}.Activity(),
			"busy kafka/orders//3 n=1 replayed=0 lag=0,false gaveUp=false reason="},
		{"kafka retry", idemkafka.Event{Kind: idemkafka.EventRetry, Topic: "orders", Err: errors.New("timeout")}.Activity(),
			"retried kafka/orders//0 n=1 replayed=0 lag=0,false gaveUp=false reason="},
		{"kafka dead letter", idemkafka.Event{Kind: idemkafka.EventDeadLettered, Topic: "orders", Reason: consumer.ReasonPermanent}.Activity(),
			"dead_lettered kafka/orders//0 n=1 replayed=0 lag=0,false gaveUp=false reason=permanent"},
		{"kafka give-up", idemkafka.Event{Kind: idemkafka.EventDiscarded, Topic: "orders", Reason: consumer.ReasonKeyReused, BrokerErr: refused}.Activity(),
			"discarded kafka/orders//0 n=1 replayed=0 lag=0,false gaveUp=true reason=key-reused"},
		{"kafka revoked", idemkafka.Event{Kind: idemkafka.EventRevoked, Topic: "orders", Partition: 1}.Activity(),
			"released kafka/orders//1 n=0 replayed=0 lag=0,false gaveUp=false reason="},
		{"kafka commit", idemkafka.Event{Kind: idemkafka.EventCommit, Topic: "orders"}.Activity(),
			"other kafka/orders//0 n=0 replayed=0 lag=0,false gaveUp=false reason="},

		{"nats acked", idemnats.Event{Kind: idemnats.EventAcked, Stream: "ORDERS", Consumer: "charger", Pending: 4}.Activity(),
			"processed nats/ORDERS/charger/ n=1 replayed=0 lag=4,true gaveUp=false reason="},
		{"nats replayed", idemnats.Event{Kind: idemnats.EventAcked, Stream: "ORDERS", Consumer: "charger", Replayed: true}.Activity(),
			"processed nats/ORDERS/charger/ n=1 replayed=1 lag=0,true gaveUp=false reason="},
		{"nats delayed", idemnats.Event{Kind: idemnats.EventDelayed, Stream: "ORDERS", Consumer: "charger"}.Activity(),
			"busy nats/ORDERS/charger/ n=1 replayed=0 lag=0,true gaveUp=false reason="},
		{"nats requeued", idemnats.Event{Kind: idemnats.EventRequeued, Stream: "ORDERS", Consumer: "charger"}.Activity(),
			"retried nats/ORDERS/charger/ n=1 replayed=0 lag=0,true gaveUp=false reason="},
		{"nats dead letter", idemnats.Event{Kind: idemnats.EventDeadLettered, Stream: "ORDERS", Reason: consumer.ReasonInvalidKey}.Activity(),
			"dead_lettered nats/ORDERS// n=1 replayed=0 lag=0,true gaveUp=false reason=invalid-key"},
		{"nats discarded", idemnats.Event{Kind: idemnats.EventDiscarded, Stream: "ORDERS", Reason: consumer.ReasonMissingKey}.Activity(),
			"discarded nats/ORDERS// n=1 replayed=0 lag=0,true gaveUp=false reason=missing-key"},
		{"nats in progress", idemnats.Event{Kind: idemnats.EventInProgress, Stream: "ORDERS", Pending: 2}.Activity(),
			"other nats/ORDERS// n=0 replayed=0 lag=2,true gaveUp=false reason="},

		{"amqp acked", idemamqp.Event{Kind: idemamqp.EventAcked, Queue: "orders", Replayed: true}.Activity(),
			"processed rabbitmq/orders// n=1 replayed=1 lag=0,false gaveUp=false reason="},
		{"amqp delayed", idemamqp.Event{Kind: idemamqp.EventDelayed, Queue: "orders"}.Activity(),
			"busy rabbitmq/orders// n=1 replayed=0 lag=0,false gaveUp=false reason="},
		{"amqp requeued busy", idemamqp.Event{Kind: idemamqp.EventRequeued, Queue: "orders", Err: idem.ErrInProgress}.Activity(),
			"busy rabbitmq/orders// n=1 replayed=0 lag=0,false gaveUp=false reason="},
		{"amqp requeued", idemamqp.Event{Kind: idemamqp.EventRequeued, Queue: "orders", Err: errors.New("timeout")}.Activity(),
			"retried rabbitmq/orders// n=1 replayed=0 lag=0,false gaveUp=false reason="},
		{"amqp unsettled", idemamqp.Event{Kind: idemamqp.EventUnsettled, Queue: "orders"}.Activity(),
			"retried rabbitmq/orders// n=1 replayed=0 lag=0,false gaveUp=false reason="},
		{"amqp give-up", idemamqp.Event{Kind: idemamqp.EventDiscarded, Queue: "orders", Reason: consumer.ReasonPermanent, BrokerErr: refused}.Activity(),
			"discarded rabbitmq/orders// n=1 replayed=0 lag=0,false gaveUp=true reason=permanent"},
		{"amqp disconnected", idemamqp.Event{Kind: idemamqp.EventDisconnected, Queue: "orders"}.Activity(),
			"other rabbitmq/orders// n=0 replayed=0 lag=0,false gaveUp=false reason="},
	} {
		if got := brief(c.got); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
