package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
)

// runKafka is the Kafka mode: with --brokers, consume or produce; without,
// start an in-process cluster (kfake), publish the orders to it, charge
// them and print the tally.
func runKafka(ctx context.Context, o options, out io.Writer) error {
	if o.brokers != "" {
		addrs := strings.Split(o.brokers, ",")
		if o.mode == "produce" {
			return produceOrders(ctx, addrs, o, out)
		}
		_, err := consumeOrders(ctx, addrs, o, out, newProvider(out), 0)
		return err
	}
	cluster, err := kfake.NewCluster(kfake.SeedTopics(4, o.topic), kfake.AllowAutoTopicCreation())
	if err != nil {
		return err
	}
	defer cluster.Close()
	addrs := cluster.ListenAddrs()
	fmt.Fprintf(out, "no --brokers given: started an in-process Kafka cluster (kfake) at %s\n", strings.Join(addrs, ","))
	if err := produceOrders(ctx, addrs, o, out); err != nil {
		return err
	}
	events, _ := newOrders(o.orders, o.dupRate, o.seed)
	p := newProvider(out)
	finished, err := consumeOrders(ctx, addrs, o, out, p, len(events))
	if err != nil {
		return err
	}
	charged, double := p.summary(o.orders)
	fmt.Fprintf(out, "\n%d messages consumed for %d orders: %d orders charged, %d double charges, %d duplicates skipped\n",
		finished, o.orders, charged, double, finished-int64(p.total))
	if charged != o.orders || double != 0 {
		return fmt.Errorf("payments: %d of %d orders charged, %d double charges", charged, o.orders, double)
	}
	return nil
}

// produceOrders publishes the orders, duplicates included, each with its
// order ID as the record's idempotency key.
func produceOrders(ctx context.Context, addrs []string, o options, out io.Writer) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(o.topic), kgo.AllowAutoTopicCreation())
	if err != nil {
		return err
	}
	defer cl.Close()
	events, dups := newOrders(o.orders, o.dupRate, o.seed)
	recs := make([]*kgo.Record, len(events))
	for i, e := range events {
		body, _ := json.Marshal(e)
		recs[i] = &kgo.Record{Value: body, Headers: []kgo.RecordHeader{{Key: idemkafka.DefaultKeyHeader, Value: []byte(e.OrderID)}}}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("payments: publishing: %w", err)
	}
	fmt.Fprintf(out, "published %d orders as %d OrderCreated events (%d duplicates) to %s\n", o.orders, len(events), dups, o.topic)
	return nil
}

// consumeOrders charges the orders of the topic's events under idem until
// ctx ends or, when stopAfter > 0, that many events were finished; it
// returns how many were.
func consumeOrders(ctx context.Context, addrs []string, o options, out io.Writer, p *provider, stopAfter int) (int64, error) {
	store, closeStore, err := openStore(ctx, o.store)
	if err != nil {
		return 0, err
	}
	defer closeStore()
	// The order service assigns order IDs: one ID is one order, whoever
	// published the event, so every key shares one scope.
	guard, err := idem.New(store, idem.Config{Namespace: "payments", Lease: 30 * time.Second, MaxAttempts: 5})
	if err != nil {
		return 0, err
	}
	defer guard.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The consumer refuses to start without its dead-letter topic (a
	// poison record would have nowhere to go), and most clusters create
	// no topic by themselves: create it, with the cluster's defaults.
	if created, err := createTopic(ctx, addrs, deadLetterTopic(o.topic), -1); err != nil {
		return 0, fmt.Errorf("payments: the dead-letter topic: %w", err)
	} else if created {
		fmt.Fprintf(out, "created the dead-letter topic %s\n", deadLetterTopic(o.topic))
	}
	var finished atomic.Int64
	consumer, err := idemkafka.New(guard, func(ctx context.Context, r *kgo.Record) error { return p.handle(ctx, r.Value) },
		idemkafka.WithSharedScope(),
		// A record that can never be charged (not an OrderCreated event)
		// goes to the dead-letter topic, with its cause in its headers;
		// a value too large to go with it is left out, its size and
		// SHA-256 recorded.
		idemkafka.WithDeadLetter(deadLetterTopic(o.topic)),
		idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
			switch e.Kind {
			case idemkafka.EventBatch:
				if finished.Add(int64(e.Records)) == int64(stopAfter) {
					cancel()
				}
			case idemkafka.EventDeadLettered:
				p.printf("dead-lettered the record at %s/%d offset %d to %s (%s): %v\n",
					e.Topic, e.Partition, e.Offset, deadLetterTopic(o.topic), e.Reason, e.Err)
			case idemkafka.EventDeadLetterFailed:
				p.printf("the dead letter of the record at %s/%d offset %d was not taken (%v); the partition waits, trying again\n",
					e.Topic, e.Partition, e.Offset, e.BrokerErr)
			case idemkafka.EventDiscarded:
				p.printf("the broker refused the dead letter of the record at %s/%d offset %d (%s: %v): %v; "+
					"skipped, it stays in %s\n", e.Topic, e.Partition, e.Offset, e.Reason, e.Err, e.BrokerErr, e.Topic)
			}
		}))
	if err != nil {
		return 0, err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.ConsumerGroup(o.group),
		kgo.ConsumeTopics(o.topic),
	}, consumer.ClientOpts()...)...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	if stopAfter == 0 {
		fmt.Fprintf(out, "consuming %s as group %s; Ctrl-C to stop\n", o.topic, o.group)
	}
	if err := consumer.Run(ctx, cl); err != nil && !errors.Is(err, context.Canceled) {
		return finished.Load(), err
	}
	return finished.Load(), nil
}

// createTopic creates topic with partitions partitions (-1: the cluster's
// default) and the cluster's default replication, and reports whether it
// did: false, and no error, when the topic exists.
func createTopic(ctx context.Context, addrs []string, topic string, partitions int32) (bool, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return false, err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, -1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return false, fmt.Errorf("create topic %s: %w", topic, err)
	}
	switch err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); {
	case err == nil:
		return true, nil
	case errors.Is(err, kerr.TopicAlreadyExists):
		return false, nil
	default:
		return false, fmt.Errorf("create topic %s: %w", topic, err)
	}
}

// deadLetterTopic is where the records of topic that can never be charged
// go.
func deadLetterTopic(topic string) string { return topic + ".dlq" }

// printf writes a line of the consumer's beside the provider's charges.
func (p *provider) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format, args...)
}
