package idemotel_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemotel"
)

// event stands for a consumer's Event type.
type event consumer.Activity

func (e event) Activity() consumer.Activity { return consumer.Activity(e) }

func TestConsumerMetrics(t *testing.T) {
	e := newEnv(t, idem.Config{})
	ctx := context.Background()
	kafka := idemotel.ConsumerObserver[event](e.tel, "billing")
	nats := idemotel.ConsumerObserver[event](e.tel, "ignored: the events name their consumer")
	const k = "messaging.consumer.group.name=billing,messaging.destination.name=orders,messaging.system=kafka"
	const n = "messaging.consumer.group.name=charger,messaging.destination.name=ORDERS,messaging.system=nats"
	kev := func(kind consumer.ActivityKind, partition string) event {
		return event{Kind: kind, System: "kafka", Destination: "orders", Partition: partition, Messages: 1}
	}
	nev := func(kind consumer.ActivityKind, pending int64) event {
		return event{Kind: kind, System: "nats", Destination: "ORDERS", Group: "charger", Messages: 1, Lag: pending, LagKnown: true}
	}

	batch := kev(consumer.ActivityProcessed, "3")
	batch.Messages, batch.Replayed, batch.Lag, batch.LagKnown = 5, 2, 7, true
	kafka(ctx, batch)
	p0 := kev(consumer.ActivityProcessed, "0")
	p0.Lag, p0.LagKnown = 4, true
	kafka(ctx, p0)
	kafka(ctx, kev(consumer.ActivityBusy, "3"))
	retry := kev(consumer.ActivityRetried, "3")
	retry.Err = &consumer.PanicError{Value: "boom"}
	kafka(ctx, retry)
	dead := kev(consumer.ActivityDeadLettered, "3")
	dead.Reason, dead.Err = consumer.ReasonPermanent, errors.New("card declined")
	kafka(ctx, dead)
	kafka(ctx, kev(consumer.ActivityReleased, "0"))     // partition 0 revoked: its lag is another member's now
	for _, refused := range []bool{true, true, false} { // a dead letter the broker did not take, tried again
		failed := kev(consumer.ActivityDeadLetterFailed, "3")
		failed.Reason, failed.Refused = consumer.ReasonPermanent, refused
		kafka(ctx, failed)
	}

	nats(ctx, nev(consumer.ActivityProcessed, 9))
	replayed := nev(consumer.ActivityProcessed, 8)
	replayed.Replayed = 1
	nats(ctx, replayed)
	stale := nev(consumer.ActivityRetried, 8)
	stale.Err = idem.ErrStoreUnavailable
	nats(ctx, stale)
	discarded := nev(consumer.ActivityDiscarded, 0)
	discarded.Reason = consumer.ReasonMissingKey
	nats(ctx, discarded)
	gaveUp := nev(consumer.ActivityDiscarded, 0)
	gaveUp.Reason, gaveUp.GaveUp = consumer.ReasonKeyReused, true
	nats(ctx, gaveUp)
	nats(ctx, nev(consumer.ActivityOther, 0)) // a progress signal: counted nowhere

	got := e.sums(t)
	for name, want := range map[string]map[string]int64{
		"idem.consumer.messages": {
			set(k, "idem.consumer.outcome=processed"):                                       4,
			set(k, "idem.consumer.outcome=replayed"):                                        2,
			set(k, "idem.consumer.outcome=dead_lettered", "idem.consumer.reason=permanent"): 1,
			set(n, "idem.consumer.outcome=processed"):                                       1,
			set(n, "idem.consumer.outcome=replayed"):                                        1,
			set(n, "idem.consumer.outcome=discarded", "idem.consumer.reason=missing-key"):   1,
			set(n, "idem.consumer.outcome=gave_up", "idem.consumer.reason=key-reused"):      1,
		},
		"idem.consumer.retries": {
			set(k, "idem.consumer.retry=busy"):                                                    1,
			set(k, "idem.consumer.retry=dead_letter_refused", "idem.consumer.reason=permanent"):   2,
			set(k, "idem.consumer.retry=dead_letter_unreached", "idem.consumer.reason=permanent"): 1,
			set(k, "idem.consumer.retry=error", "error.type=*consumer.PanicError"):                1,
			set(n, "idem.consumer.retry=error", "error.type=store_unavailable"):                   1,
		},
		"idem.consumer.lag": {
			set(k, "messaging.destination.partition.id=3"): 7,
			n: 0,
		},
	} {
		if len(got[name]) != len(want) {
			t.Errorf("%s = %v, want %v", name, got[name], want)
			continue
		}
		for a, v := range want {
			if got[name][a] != v {
				t.Errorf("%s{%s} = %d, want %d (all: %v)", name, a, got[name][a], v, got[name])
			}
		}
	}
}

// set writes the attributes of the "key=value" lists parts, each
// comma-separated, as [attrs] does: sorted by key.
func set(parts ...string) string {
	var all []string
	for _, p := range parts {
		all = append(all, strings.Split(p, ",")...)
	}
	slices.Sort(all)
	return strings.Join(all, ",")
}
