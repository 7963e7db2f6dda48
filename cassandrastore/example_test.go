package cassandrastore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cassandrastore"
)

// A Guard over Cassandra. The session is the application's own, configured
// as usual (hosts, authentication, TLS, the local datacenter); the store
// only uses it.
func Example() {
	ctx := context.Background()
	cluster := gocql.NewCluster("10.0.0.1", "10.0.0.2", "10.0.0.3")
	cluster.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy("dc1"))
	sess, err := cluster.CreateSession()
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()

	store, err := cassandrastore.New(sess, cassandrastore.Config{Keyspace: "idem", SerialConsistency: gocql.LocalSerial})
	if err != nil {
		log.Fatal(err)
	}
	// Leases a little longer than usual: a Paxos round under load can take
	// a second or more, and the heartbeat extends the lease every third.
	g, err := idem.New(store, idem.Config{Namespace: "charges", Lease: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	charge := func(ctx context.Context) ([]byte, error) { return []byte("ch_1"), nil }
	if res, err := g.Do(ctx, "order-1", []byte(`{"amount":1000}`), charge); errors.Is(err, idem.ErrStoreUnavailable) {
		log.Print("no quorum, or Cassandra timed out: retry later") // the Guard failed closed
	} else if err == nil {
		fmt.Printf("%s (replayed %v)\n", res.Value, res.Replayed)
	}
}

// Migrate makes the keyspace and table at start-up (or in a migration
// step), with the replication the operator chose; it does nothing to a
// keyspace or table that exists.
func ExampleMigrate() {
	sess, err := gocql.NewCluster("10.0.0.1").CreateSession()
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()
	replication := cassandrastore.NetworkTopologyStrategy(map[string]int{"dc1": 3, "dc2": 3})
	if err := cassandrastore.Migrate(context.Background(), sess, cassandrastore.Config{Keyspace: "idem"}, replication); err != nil {
		log.Fatal(err)
	}
}

// A store URL names a contact point, the keyspace and the store's options.
func ExampleParseURL() {
	u, err := cassandrastore.ParseURL("cassandra://10.0.0.1/idem?local_dc=dc1&serial_consistency=local_serial&replication=NetworkTopologyStrategy:dc1=3")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(u.Host, u.Config.Keyspace, u.LocalDC, u.Config.SerialConsistency, u.Replication)
	// Output:
	// 10.0.0.1:9042 idem dc1 LOCAL_SERIAL NetworkTopologyStrategy:dc1=3
}
