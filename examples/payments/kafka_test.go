package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaTopic creates a topic of t's own (a random suffix after prefix)
// with partitions partitions and one replica on brokers, deleted when t
// ends, and returns its name.
func kafkaTopic(t *testing.T, brokers []string, prefix string, partitions int32) string {
	t.Helper()
	name := prefix + "." + rand.Text()[:10]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := topicRequest(ctx, brokers, name, partitions, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A topic left behind costs the broker a little disk, not a test.
		if err := topicRequest(ctx, brokers, name, 0, false); err != nil {
			t.Log(err)
		}
	})
	return name
}

// topicRequest creates (with partitions partitions) or deletes topic.
func topicRequest(ctx context.Context, brokers []string, topic string, partitions int32, create bool) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	what := "delete"
	var code int16
	if create {
		what = "create"
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 30000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
		req.Topics = append(req.Topics, rt)
		var resp *kmsg.CreateTopicsResponse
		if resp, err = req.RequestWith(ctx, cl); err == nil {
			code = resp.Topics[0].ErrorCode
		}
	} else {
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.TimeoutMillis = 30000
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		var resp *kmsg.DeleteTopicsResponse
		if resp, err = req.RequestWith(ctx, cl); err == nil {
			code = resp.Topics[0].ErrorCode
		}
	}
	if err == nil {
		err = kerr.ErrorForCode(code)
	}
	if err != nil {
		return fmt.Errorf("%s topic %s: %w", what, topic, err)
	}
	return nil
}
