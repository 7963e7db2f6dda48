// Package storeurl opens an idem store from a URL, the way a command line
// or a configuration file names one:
//
//	s, closeStore, err := storeurl.Open(ctx, "redis://127.0.0.1:6379/0")
//
// The schemes, and the package that links each into a program:
//
//	mem://                                   memstore, in the process (this package)
//	redis://[user:password@]host:port[/db]   Redis (rediss:// for TLS)             storeurl/redisurl
//	    ?prefix= the key prefix (default idem:); other parameters are go-redis's (dial_timeout=, pool_size=, …)
//	postgres://user@host:port/db             PostgreSQL (postgresql:// too)        storeurl/pgurl
//	    ?table=[schema.]name the records table (default idem_records); other parameters are pgx's (sslmode=, …)
//	dynamodb://host:port/table               a DynamoDB-compatible server at       storeurl/dynamourl
//	                                         http://host:port (dynalite, DynamoDB Local)
//	dynamodb:///table                        DynamoDB on AWS, with the SDK's default region and credentials;
//	    ?region= the region; the table defaults to idem_records
//	cassandra://[user:password@]host[:port]/keyspace  Apache Cassandra (or ScyllaDB)    storeurl/cassandraurl
//	    ?table= (default idem_records), consistency=, serial_consistency=, local_dc=, max_clock_skew=, timeout=,
//	    replication=SimpleStrategy:N|NetworkTopologyStrategy:dc1=N,… (for Migrate)
//	sqlite://idem.db, sqlite:///abs/idem.db  a SQLite file, created with its table if missing  storeurl/sqliteurl
//	    ?table=name (default idem_records), ?synchronous=full|normal (default full)
//
// Only mem:// is linked by this package alone. Each other scheme is linked
// by importing its package for its side effect, as a database/sql driver
// is, so that a program that opens Redis stores links go-redis and not the
// PostgreSQL, AWS and SQLite clients as well:
//
//	import (
//		"github.com/idemgo/idem/storeurl"
//		_ "github.com/idemgo/idem/storeurl/pgurl"
//		_ "github.com/idemgo/idem/storeurl/redisurl"
//	)
//
// A URL of a known scheme whose package is not linked is an [*URLError]
// that names the package to import.
//
// # Secrets
//
// A URL may hold a password (in its user info) or a secret parameter
// (password=, sslpassword=, secret_access_key=, token=, …). No error Open
// returns prints one: an error names the URL as [Redact] writes it, and the
// message of a driver's error that repeats a secret is scrubbed (see
// [Secrets]). A password with an unescaped "/", "?" or "#" is refused
// before any driver reads it (a driver would take a piece of it for the
// host or the path, and print that piece): percent-encode it. Print a
// store URL, a NATS URL (nats://TOKEN@host) or a libpq connection string
// (host=… password=…) through [Redact] too.
//
// # Tables
//
// With the [Migrate] option, Open creates or upgrades the records table of
// a PostgreSQL store (pgstore.Migrate) and creates, or checks and
// completes, the table of a DynamoDB store (dynamostore.CreateTable), and
// creates the keyspace (with the URL's replication=) and table of a
// Cassandra store (cassandrastore.Migrate); all are idempotent. Without
// it, a DynamoDB or Cassandra store's table is checked (CheckTable) and a
// PostgreSQL one is used as it is. A SQLite
// store creates its file and table in any case: the file is the program's
// own. Redis and memstore have no table.
package storeurl
