package cassandrastore_test

import (
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/idemgo/idem/cassandrastore"
	"github.com/idemgo/idem/cassandrastore/cassandrastoretest"
	"github.com/idemgo/idem/storage"
)

func TestParseURL(t *testing.T) {
	u, err := cassandrastore.ParseURL("cassandra://alice:S3cret@10.0.0.1/orders?table=records&consistency=local_quorum" +
		"&serial_consistency=local_serial&local_dc=dc1&max_clock_skew=250ms&timeout=3s&replication=NetworkTopologyStrategy:dc1=3,dc2=2")
	if err != nil {
		t.Fatal(err)
	}
	want := cassandrastore.URL{
		Host: "10.0.0.1:9042", Username: "alice", Password: "S3cret", LocalDC: "dc1", Timeout: 3 * time.Second,
		Config: cassandrastore.Config{Keyspace: "orders", Table: "records", Consistency: gocql.LocalQuorum,
			SerialConsistency: gocql.LocalSerial, MaxClockSkew: 250 * time.Millisecond},
		Replication: cassandrastore.NetworkTopologyStrategy(map[string]int{"dc1": 3, "dc2": 2}),
	}
	if u.Replication.String() != want.Replication.String() {
		t.Fatalf("replication %v, want %v", u.Replication, want.Replication)
	}
	u.Replication, want.Replication = cassandrastore.Replication{}, cassandrastore.Replication{}
	if u.Host != want.Host || u.Username != want.Username || u.Password != want.Password || u.LocalDC != want.LocalDC ||
		u.Timeout != want.Timeout || u.Config.Keyspace != want.Config.Keyspace || u.Config.Table != want.Config.Table ||
		u.Config.Consistency != want.Config.Consistency || u.Config.SerialConsistency != want.Config.SerialConsistency ||
		u.Config.MaxClockSkew != want.Config.MaxClockSkew {
		t.Fatalf("ParseURL = %+v, want %+v", u, want)
	}
	if u, err := cassandrastore.ParseURL("cassandra://[::1]:9043"); err != nil || u.Host != "[::1]:9043" || u.Config.Keyspace != "idem" {
		t.Fatalf("ParseURL of a bare host: %+v, %v", u, err)
	}
	for _, tc := range []struct{ raw, want string }{
		{"redis://127.0.0.1:6379", "scheme"},
		{"cassandra:///idem", "no host"},
		{"cassandra://h:0/idem", "port"},
		{"cassandra://h/a-b", `keyspace "a-b"`},
		{"cassandra://h/idem?table=x.y", `table "x.y"`},
		{"cassandra://h/idem?consistency=one", "consistency="},
		{"cassandra://h/idem?consistency=serial", "consistency="},
		{"cassandra://h/idem?serial_consistency=quorum", "serial_consistency="},
		{"cassandra://h/idem?max_clock_skew=2h", "max_clock_skew="},
		{"cassandra://h/idem?replication=SimpleStrategy:0", "replication="},
		{"cassandra://h/idem?replication=NetworkTopologyStrategy:dc1=3,dc1=2", "replication="},
		{"cassandra://h/idem?replication=LocalStrategy", "replication="},
		{"cassandra://h/idem?table=", "table="},
		{"cassandra://h/idem?password=S3cret", `unknown parameter "password"`},
		{"cassandra://u:S3cret@h/a-b", "keyspace"},
		{"cassandra://[::1", "store URL"},
	} {
		_, err := cassandrastore.ParseURL(tc.raw)
		if err == nil || !strings.HasPrefix(err.Error(), "cassandrastore: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q): %v, want an error about %s", tc.raw, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "S3cret") {
			t.Errorf("ParseURL(%q): the error shows the secret: %v", tc.raw, err)
		}
	}
}

// FuzzParseURL: whatever the text, ParseURL answers without panicking, an
// error never prints the URL's password, and a URL it takes opens a
// Config that New takes.
func FuzzParseURL(f *testing.F) {
	f.Add("cassandra://u:S3cret@127.0.0.1:9042/idem?table=t&consistency=quorum")
	f.Add("cassandra://h/k?replication=NetworkTopologyStrategy:dc1=3&local_dc=dc1")
	f.Add("cassandra://[::1]/idem?max_clock_skew=1ms&timeout=1h&serial_consistency=local_serial")
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := cassandrastore.ParseURL(raw)
		if err != nil {
			if p := urlPassword(raw); len(p) >= 4 && strings.Contains(err.Error(), p) && !strings.Contains(raw[:strings.Index(raw, p)], "://") {
				t.Fatalf("ParseURL(%q): %v: prints the password", raw, err)
			}
			return
		}
		sess := &gocql.Session{} // New keeps it and sends nothing
		if _, err := cassandrastore.New(sess, u.Config); err != nil {
			t.Fatalf("ParseURL(%q) took a Config that New refuses: %v", raw, err)
		}
	})
}

// urlPassword returns the password of raw's user info, as written.
func urlPassword(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return ""
	}
	info, _, ok := strings.Cut(rest, "@")
	if !ok {
		return ""
	}
	_, p, _ := strings.Cut(info, ":")
	return p
}

// A store opened from a URL reaches the node and its table.
func TestURLSession(t *testing.T) {
	u, err := cassandrastore.ParseURL(cassandrastoretest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	sess, err := u.NewCluster().CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	s, err := cassandrastore.New(sess, u.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckTable(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Claim(ctxT(t), args(t, time.Minute)); err != nil || c.Outcome != storage.Acquired {
		t.Fatalf("Claim through the URL's session: %+v, %v", c, err)
	}
	missing, _ := cassandrastore.New(sess, cassandrastore.Config{Keyspace: u.Config.Keyspace, Table: "missing"})
	if err := missing.CheckTable(ctxT(t)); err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("CheckTable of a missing table: %v, want an error naming Migrate", err)
	}
}
