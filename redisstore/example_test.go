package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// A Guard over Redis. NewUniversalClient returns a cluster client for
// several addresses and a Sentinel client when MasterName is set: the
// store works with all of them.
func Example() {
	client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.Config{Prefix: "payments:"})
	if err != nil {
		log.Fatal(err)
	}
	g, err := idem.New(store, idem.Config{Namespace: "charges", Retention: 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	res, err := g.Do(context.Background(), "order-1", []byte(`{"amount":1000}`), func(ctx context.Context) ([]byte, error) {
		return []byte("ch_1"), nil // charge the card here
	})
	switch {
	case errors.Is(err, idem.ErrStoreUnavailable):
		log.Print("Redis is down: retry later") // the Guard failed closed
	case err != nil:
		log.Print(err)
	default:
		fmt.Println(string(res.Value), res.Replayed)
	}
}

// With replicas, every outcome can wait for one of them to hold it before
// the Guard reports success.
func ExampleConfig_waitReplicas() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "payments",
		SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
	})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.Config{WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	_ = store // idem.New(store, …)
}

// A consumer that fetched a batch of messages claims them in one round
// trip.
func ExampleStore_ClaimBatch() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	store, _ := redisstore.New(client, redisstore.Config{})

	ctx := context.Background()
	var args []storage.ClaimArgs
	for _, id := range []string{"msg-1", "msg-2", "msg-3"} {
		args = append(args, storage.ClaimArgs{
			Key:         storage.StoreKey("orders", id),
			Fingerprint: idem.SHA256Fingerprint(nil, []byte(id)),
			Lease:       30 * time.Second,
			Retention:   24 * time.Hour,
		})
	}
	claims, err := store.ClaimBatch(ctx, args)
	if err != nil {
		log.Fatal(err) // Redis unreachable: redeliver the batch later
	}
	for i, c := range claims {
		switch {
		case c.Err != nil:
			log.Printf("%s: %v", args[i].Key, c.Err)
		case c.Outcome == storage.Acquired:
			// process, then Complete (or CompleteBatch) with c.Token
		case c.Outcome == storage.Duplicate:
			// already processed: ack
		case c.Outcome == storage.Busy:
			// another consumer has it: redeliver later
		}
	}
}

// The Redis key of a record, for TTL, MEMORY USAGE or SCAN in redis-cli.
// It needs no server.
func ExampleStore_RedisKey() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	store, _ := redisstore.New(client, redisstore.Config{})

	fmt.Println(store.RedisKey(storage.StoreKey("charges", "order-1")))
	// Output: idem:{B2NoYXJnZXMAb3JkZXItMQ}
}
