package cassandrastore_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/idemgo/idem/cassandrastore"
	"github.com/idemgo/idem/cassandrastore/cassandrastoretest"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/storage"
)

func TestConformance(t *testing.T) {
	s := cassandrastoretest.Store(t, cassandrastore.Config{})
	idemtest.Run(t, func(*testing.T) storage.Store { return s })
}

// The store with Paxos among the local datacenter's replicas, and commits
// at LOCAL_QUORUM, holds to the contract as well (the test node is a
// datacenter of its own).
func TestConformanceLocalSerial(t *testing.T) {
	s := cassandrastoretest.Store(t, cassandrastore.Config{SerialConsistency: gocql.LocalSerial})
	if s.Config().Consistency != gocql.LocalQuorum {
		t.Fatalf("Consistency with LOCAL_SERIAL: %v, want LOCAL_QUORUM by default", s.Config().Consistency)
	}
	idemtest.Run(t, func(*testing.T) storage.Store { return s })
}

// A holder whose claim another Store made (another process) finishes
// through its own Store: the first write's failed condition tells it the
// record's columns, and the second writes.
func TestForeignHolder(t *testing.T) {
	t.Parallel()
	claimer := cassandrastoretest.Store(t, cassandrastore.Config{})
	holder := cassandrastoretest.Store(t, cassandrastore.Config{})
	for _, op := range []string{"Extend", "Complete", "Release"} {
		a := args(t, time.Minute)
		c, err := claimer.Claim(ctxT(t), a)
		if err != nil || c.Outcome != storage.Acquired {
			t.Fatalf("Claim: %+v, %v", c, err)
		}
		switch op {
		case "Extend":
			err = holder.Extend(ctxT(t), a.Key, c.Token, 2*time.Minute)
		case "Complete":
			err = holder.Complete(ctxT(t), a.Key, c.Token, []byte("v"), time.Minute)
		case "Release":
			err = holder.Release(ctxT(t), a.Key, c.Token)
		}
		if err != nil {
			t.Fatalf("%s through another Store: %v", op, err)
		}
		rec, err := claimer.Get(ctxT(t), a.Key)
		if err != nil || !bytes.Equal(rec.Fingerprint, a.Fingerprint) || rec.Attempt != 1 {
			t.Fatalf("after %s: %+v, %v; want the claim's fingerprint and attempt kept", op, rec, err)
		}
		// The claimer's memory of the record is stale now, and its write
		// must find out from the condition.
		err = claimer.Complete(ctxT(t), a.Key, c.Token, []byte("w"), time.Minute)
		if op == "Extend" && err != nil || op != "Extend" && !errors.Is(err, storage.ErrLeaseLost) {
			t.Fatalf("claimer's Complete after the holder's %s: %v", op, err)
		}
	}
}

// Every column of a record carries the TTL of its expiry plus
// MaxClockSkew, and Cassandra drops the record's cells after it. (The row
// marker of the claim's INSERT keeps the claim's TTL: a row without cells,
// which every call takes for no record.)
func TestRetentionIsTTL(t *testing.T) {
	t.Parallel()
	s := cassandrastoretest.Store(t, cassandrastore.Config{MaxClockSkew: 10 * time.Millisecond})
	a := args(t, time.Minute)
	c, err := s.Claim(ctxT(t), a)
	if err != nil {
		t.Fatal(err)
	}
	ttls := func() []int {
		var out []int
		q := "SELECT TTL(status), TTL(tok), TTL(attempt), TTL(fp), TTL(lease_until), TTL(expires_at), TTL(retention), TTL(result) FROM " +
			cassandrastoretest.Keyspace(t) + "." + cassandrastore.DefaultTable + " WHERE k = ?"
		var v [8]*int
		err := cassandrastoretest.Session(t).Query(q, []byte(a.Key)).Consistency(gocql.Serial).ScanContext(ctxT(t), &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7])
		if errors.Is(err, gocql.ErrNotFound) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range v {
			if p != nil {
				out = append(out, *p)
			}
		}
		if len(out) != 0 && len(out) != len(v) {
			t.Fatalf("columns without a TTL: %d of %d have one", len(out), len(v))
		}
		return out
	}
	for _, ttl := range ttls() {
		if ttl < 115 || ttl > 122 { // lease 1m + retention 1m
			t.Fatalf("TTLs after the claim %v, want about 120 s", ttls())
		}
	}
	if err := s.Complete(ctxT(t), a.Key, c.Token, []byte("v"), time.Second); err != nil {
		t.Fatal(err)
	}
	for _, ttl := range ttls() {
		if ttl < 1 || ttl > 3 {
			t.Fatalf("TTLs after Complete with a retention of 1s %v, want 1 to 3 s", ttls())
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for ttls() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the record's cells are still stored 10 s after their TTL")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestDeleteIf(t *testing.T) {
	t.Parallel()
	s := cassandrastoretest.Store(t, cassandrastore.Config{})
	ctx := ctxT(t)
	if err := s.DeleteIf(ctx, args(t, time.Minute).Key, storage.StatusInProgress, 1); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("DeleteIf of an absent key: %v, want ErrNotFound", err)
	}
	a := args(t, time.Minute)
	c, _ := s.Claim(ctx, a)
	if err := s.DeleteIf(ctx, a.Key, storage.StatusInProgress, c.Token+1); !errors.Is(err, storage.ErrChanged) {
		t.Fatalf("DeleteIf with another token: %v, want ErrChanged", err)
	}
	if err := s.DeleteIf(ctx, a.Key, storage.StatusCompleted, c.Token); !errors.Is(err, storage.ErrChanged) {
		t.Fatalf("DeleteIf with another status: %v, want ErrChanged", err)
	}
	if err := s.Complete(ctx, a.Key, c.Token, []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteIf(ctx, a.Key, storage.StatusCompleted, c.Token); err != nil {
		t.Fatalf("DeleteIf of the record as it is: %v", err)
	}
	if _, err := s.Get(ctx, a.Key); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get after DeleteIf: %v, want ErrNotFound", err)
	}
}

// Values up to MaxValueSizeLimit fit with the longest key and
// fingerprint; arguments out of range are refusals of one key.
func TestLimits(t *testing.T) {
	t.Parallel()
	s := cassandrastoretest.Store(t, cassandrastore.Config{MaxValueSize: cassandrastore.MaxValueSizeLimit})
	a := storage.ClaimArgs{
		Key:         strings.Repeat("\xff", cassandrastore.MaxKeyLen-len(t.Name())) + t.Name(),
		Fingerprint: bytes.Repeat([]byte{0xfe}, cassandrastore.MaxFingerprintLen),
		Lease:       time.Minute, Retention: time.Minute,
	}
	c, err := s.Claim(ctxT(t), a)
	if err != nil || c.Outcome != storage.Acquired {
		t.Fatalf("Claim of the longest key and fingerprint: %+v, %v", c, err)
	}
	value := bytes.Repeat([]byte{'v'}, cassandrastore.MaxValueSizeLimit)
	if err := s.Complete(ctxT(t), a.Key, c.Token, value, time.Minute); err != nil {
		t.Fatalf("Complete with MaxValueSizeLimit bytes: %v", err)
	}
	if d, err := s.Claim(ctxT(t), a); err != nil || !bytes.Equal(d.Record.Result, value) {
		t.Fatalf("the largest value did not come back: %v", err)
	}
	long := a
	long.Key += "x"
	for name, err := range map[string]error{
		"long key":   func() error { _, err := s.Claim(ctxT(t), long); return err }(),
		"zero lease": func() error { b := a; b.Lease = 0; _, err := s.Claim(ctxT(t), b); return err }(),
		"long value": s.Complete(ctxT(t), a.Key, c.Token, append(value, 'x'), time.Minute),
	} {
		if !errors.Is(err, storage.ErrRefused) {
			t.Fatalf("%s: %v, want a refusal (storage.ErrRefused)", name, err)
		}
	}
	if _, err := cassandrastore.New(cassandrastoretest.Session(t), cassandrastore.Config{Consistency: gocql.One}); err == nil ||
		!strings.Contains(err.Error(), "Config.Consistency") {
		t.Fatalf("New with Consistency ONE: %v, want an error naming the field", err)
	}
}

// A node that cannot be reached is an outage, not a refusal.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	c := gocql.NewCluster("127.0.0.1:1")
	c.ConnectTimeout, c.Timeout = 200*time.Millisecond, 200*time.Millisecond
	if _, err := c.CreateSession(); err == nil {
		t.Fatal("a session of a closed port")
	}
	// A session to the node, closed: every call fails as the network would.
	sess, err := cassandrastoretest.NewCluster().CreateSession()
	if err != nil {
		t.Skip(err)
	}
	sess.Close()
	s, _ := cassandrastore.New(sess, cassandrastore.Config{Keyspace: cassandrastoretest.Keyspace(t)})
	if _, err := s.Claim(ctxT(t), args(t, time.Minute)); !errors.Is(err, storage.ErrStoreUnavailable) || errors.Is(err, storage.ErrRefused) {
		t.Fatalf("Claim on a closed session: %v, want ErrStoreUnavailable", err)
	}
}
