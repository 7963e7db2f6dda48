package cassandrastore

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// URL is a store URL of scheme cassandra, as command lines and
// configuration files name a store:
//
//	cassandra://127.0.0.1:9042/idem
//	cassandra://user:password@10.0.0.1/idem?table=records&local_dc=dc1&serial_consistency=local_serial
//
// The host is one contact point (port 9042 by default); the driver finds
// the cluster's other nodes from it. User and password, when given, log
// in with Cassandra's PasswordAuthenticator. The path names the keyspace
// (default idem). Query parameters:
//
//	table=               the records table (default idem_records)
//	consistency=         quorum, local_quorum, each_quorum or all (Config.Consistency)
//	serial_consistency=  serial or local_serial (Config.SerialConsistency)
//	local_dc=            the datacenter whose nodes coordinate the requests (token-aware within it)
//	max_clock_skew=      Config.MaxClockSkew, a Go duration (1s)
//	timeout=             the driver's request timeout, a Go duration (default 11s)
//	replication=         the keyspace's replication, for Migrate only: SimpleStrategy:N
//	                     or NetworkTopologyStrategy:dc1=N,dc2=M
type URL struct {
	// Host is the contact point, host:port.
	Host string
	// Username and Password log in, when Username is not empty.
	Username, Password string
	// Config holds the keyspace, table, consistencies and clock skew the
	// URL sets; the rest is zero (defaults).
	Config Config
	// LocalDC is the local datacenter, "" for none.
	LocalDC string
	// Timeout is the request timeout, 0 for the driver's default.
	Timeout time.Duration
	// Replication is the replication= parameter's, for [Migrate]; its
	// Class is "" when the URL has none.
	Replication Replication
}

// ParseURL parses a cassandra:// store URL (see [URL]). Unknown
// parameters, and values the store would refuse, are errors; no error
// repeats the URL, nor its password or a parameter's value.
func ParseURL(raw string) (URL, error) {
	u, err := url.Parse(raw)
	if err != nil { // a *url.Error: what it unwraps to does not repeat the URL, which may hold a password
		return URL{}, fmt.Errorf("cassandrastore: store URL: %w", errors.Unwrap(err))
	}
	// The messages do not repeat the URL either: storeurl.Open prints it
	// redacted beside them.
	fail := func(format string, args ...any) (URL, error) {
		return URL{}, fmt.Errorf("cassandrastore: store URL: "+format, args...)
	}
	if u.Scheme != "cassandra" {
		return fail("scheme %q, want cassandra", u.Scheme)
	}
	if u.Hostname() == "" {
		return fail("no host: want cassandra://host[:port]/keyspace")
	}
	p := URL{Host: u.Host}
	if u.Port() == "" {
		p.Host = net.JoinHostPort(u.Hostname(), "9042")
	} else if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
		return fail("port: want 1 to 65535")
	}
	if u.User != nil {
		p.Username = u.User.Username()
		p.Password, _ = u.User.Password()
	}
	p.Config.Keyspace = cmp.Or(strings.TrimPrefix(u.Path, "/"), DefaultKeyspace)
	if !validName.MatchString(p.Config.Keyspace) {
		return fail("keyspace %q: must be 1 to 48 letters, digits or '_', starting with a letter", p.Config.Keyspace)
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return fail("malformed query")
	}
	for name, vs := range query {
		if len(vs) != 1 || vs[0] == "" {
			return fail("%s= must be given once, not empty", name)
		}
		if msg := p.setParam(name, vs[0]); msg != "" {
			return fail("%s", msg)
		}
	}
	return p, nil
}

// setParam sets the query parameter name of a store URL to v, and returns
// what is wrong with it ("" when nothing is).
func (p *URL) setParam(name, v string) string {
	switch name {
	case "table":
		if !validName.MatchString(v) {
			return fmt.Sprintf("table %q: must be 1 to 48 letters, digits or '_', starting with a letter", v)
		}
		p.Config.Table = v
	case "consistency":
		c, ok := consistencies[v]
		if !ok || c == gocql.Serial || c == gocql.LocalSerial {
			return "consistency= must be quorum, local_quorum, each_quorum or all"
		}
		p.Config.Consistency = c
	case "serial_consistency":
		c, ok := consistencies[v]
		if !ok || c != gocql.Serial && c != gocql.LocalSerial {
			return "serial_consistency= must be serial or local_serial"
		}
		p.Config.SerialConsistency = c
	case "local_dc":
		if !validDC.MatchString(v) {
			return "local_dc= must be a datacenter name"
		}
		p.LocalDC = v
	case "max_clock_skew", "timeout":
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Millisecond || d > time.Hour {
			return fmt.Sprintf("%s= must be a duration from 1ms to 1h (such as 1s)", name)
		}
		if name == "timeout" {
			p.Timeout = d
		} else {
			p.Config.MaxClockSkew = d
		}
	case "replication":
		r, err := parseReplication(v)
		if err != nil {
			return fmt.Sprintf("replication=: %v", err)
		}
		p.Replication = r
	default:
		return fmt.Sprintf("unknown parameter %q (known: table, consistency, serial_consistency, local_dc, max_clock_skew, timeout, replication)", name)
	}
	return ""
}

var consistencies = map[string]gocql.Consistency{
	"quorum": gocql.Quorum, "local_quorum": gocql.LocalQuorum, "each_quorum": gocql.EachQuorum, "all": gocql.All,
	"serial": gocql.Serial, "local_serial": gocql.LocalSerial,
}

// parseReplication parses SimpleStrategy:N or
// NetworkTopologyStrategy:dc1=N,dc2=M.
func parseReplication(v string) (Replication, error) {
	class, rest, _ := strings.Cut(v, ":")
	var r Replication
	switch class {
	case "SimpleStrategy":
		n, err := strconv.Atoi(rest)
		if err != nil {
			return r, errors.New("SimpleStrategy:N, N the replica count")
		}
		r = SimpleStrategy(n)
	case "NetworkTopologyStrategy":
		dcs := map[string]int{}
		for dc := range strings.SplitSeq(rest, ",") {
			name, count, ok := strings.Cut(dc, "=")
			n, err := strconv.Atoi(count)
			if _, dup := dcs[name]; !ok || err != nil || dup {
				return r, errors.New("NetworkTopologyStrategy:dc1=N,dc2=M, each datacenter once")
			}
			dcs[name] = n
		}
		r = NetworkTopologyStrategy(dcs)
	default:
		return r, errors.New("want SimpleStrategy:N or NetworkTopologyStrategy:dc1=N,dc2=M")
	}
	if _, err := r.cql(); err != nil {
		return Replication{}, err
	}
	return r, nil
}

// NewCluster returns the driver's cluster configuration for the URL: its
// contact point, credentials, request timeout and, with local_dc=, a
// token-aware policy over the local datacenter's nodes. Change it further
// (TLS, pools) before CreateSession.
func (u URL) NewCluster() *gocql.ClusterConfig {
	c := gocql.NewCluster(u.Host)
	if u.Username != "" {
		c.Authenticator = gocql.PasswordAuthenticator{Username: u.Username, Password: u.Password}
	}
	if u.Timeout > 0 {
		c.Timeout = u.Timeout
	}
	if u.LocalDC != "" {
		c.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy(u.LocalDC))
	}
	return c
}
