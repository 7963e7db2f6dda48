// Package cassandrastore keeps idem's records in an Apache Cassandra table
// (or ScyllaDB's, which speaks its protocol): a [Store] over the
// application's own session of the Apache Cassandra Go driver, so hosts,
// authentication, TLS, pools and timeouts stay the application's.
//
//	cluster := gocql.NewCluster("10.0.0.1", "10.0.0.2", "10.0.0.3")
//	sess, _ := cluster.CreateSession()
//	_ = cassandrastore.Migrate(ctx, sess, cassandrastore.Config{Keyspace: "idem"},
//		cassandrastore.NetworkTopologyStrategy(map[string]int{"dc1": 3}))
//	store, err := cassandrastore.New(sess, cassandrastore.Config{Keyspace: "idem"})
//	g, err := idem.New(store, idem.Config{Namespace: "payments"})
//
// # One partition per record
//
// A record is one row, and the row is a partition of its own: its key "k"
// is the store key's bytes (a blob, so any bytes). No partition grows
// with traffic. The columns are listed at [ColKey] and the following
// constants, and in the README with the table's CQL.
//
// # Every transition is one lightweight transaction
//
// Claim of an absent key is one INSERT … IF NOT EXISTS. When the key is
// taken Cassandra answers with the row that is there, and that row
// answers the claim: Busy, Duplicate (with the stored outcome) or
// ErrKeyReused, in one Paxos round. A record whose lease is over, or that
// expired and is not deleted yet, is taken over by one UPDATE … IF
// conditioned on the record being as the claim saw it; if it changed
// meanwhile the claim starts again, so of any number of concurrent claims
// exactly one succeeds. Complete, Fail, Release and Extend are one
// UPDATE … IF each, conditioned on the caller's token being the record's,
// the record InProgress and as the claim left it: the fencing token is
// compared by Cassandra in the Paxos round, never read first and written
// after. Delete and DeleteIf are conditional too (DELETE … IF), as a plain
// write beside Paxos writes of one partition may be ordered before them.
//
// The Paxos phase runs at Config.SerialConsistency (SERIAL, or
// LOCAL_SERIAL for a table whose clients stay in one datacenter), the
// commit at Config.Consistency (QUORUM, or LOCAL_QUORUM). Get reads at
// SERIAL, which sees every committed write and completes one left in
// flight. A Paxos round costs four round trips between replicas with
// Cassandra's first Paxos, two with paxos_variant: v2 (Cassandra 4.1 and
// later); a plain write costs one.
//
// Tokens are 64 random bits drawn in the process, never zero: they owe
// nothing to the table, so a record that expired and was created again
// does not bring one back.
//
// # Outcomes Cassandra cannot tell
//
// A conditional write can end without an answer: a WriteTimeoutException
// of write type CAS (Paxos did not finish in time: the write may be
// applied, now or by the next round on the partition), CAS_WRITE_UNKNOWN,
// or no reply at all. The store then reads the record back at
// SerialConsistency. Such a read completes an accepted proposal left in
// flight, and voids one it does not see (it proposes at a newer ballot),
// so what it reads is final: a claim is Acquired only when the record
// holds its own token, and Complete, Fail, Release, Extend and Delete
// succeed only when the record holds what they wrote; when it still holds
// what they conditioned on they write again, and anything else is the
// answer (Busy, Duplicate, ErrLeaseLost). A claim whose read-back fails
// too returns the error and never a token: if its write was applied after
// all, the key stays InProgress with nobody holding it until its lease
// ends, as after a crashed holder. No store key ever has two holders.
//
// # Time is the hosts' clocks
//
// Cassandra has no clock a condition can read. Lease ends and expiry times
// are written as Unix milliseconds from the writing host's clock
// (Config.Now), and the store compares them with the reading host's clock
// less Config.MaxClockSkew (default 1s) before it writes, conditioning the
// write on the record it compared: a lease or record is over only when it
// has been over for MaxClockSkew on the reader's clock. While the clocks
// of all hosts sharing the table are within MaxClockSkew of each other, no
// host takes over a lease before it has ended in real time, nor treats an
// outcome as expired before its retention has passed; a takeover after a
// crash waits up to MaxClockSkew longer. A Guard's holder keeps its own
// deadline on its monotonic clock and is not affected.
//
// When a host's clock runs ahead of another's by more than MaxClockSkew it
// sees leases end early, and takes a key over while its holder is still
// running: the operation runs twice at once, though fencing still holds
// (the displaced holder's Complete gets ErrLeaseLost; a side effect fenced
// with idem.TokenFrom is refused). It also sees outcomes expire early. A
// host whose clock is behind waits longer, which is safe. Keep hosts on
// NTP and MaxClockSkew well above their worst drift; Cassandra itself
// needs synchronized clocks for its own timestamps.
//
// # Expiry by TTL
//
// Every write sets a TTL, on every column it writes, of the record's
// expiry plus MaxClockSkew (whole seconds, rounded up): Cassandra drops
// the record's cells after every host has seen it expire, and compaction
// purges them gc_grace_seconds later. A TTL is per cell, so every write
// writes every column of the record, which needs their values: the Store
// remembers them for the claims it made, and a holder it does not know
// (the claim made by another process) costs one more Paxos round, the
// first write's failed condition returning them. Until Cassandra drops an
// expired record every call treats it as absent. The claim's INSERT also
// writes a row marker, which keeps the claim's TTL (its lease and
// retention) when an outcome with a shorter retention rewrites the cells:
// until then the row is a key without columns, which every call takes for
// no record, and which the next claim of the key overwrites.
//
// # Batches
//
// A conditional batch must stay within one partition, and every record is
// a partition of its own, so there is no batch that claims several keys
// atomically, or in one Paxos round. [Store.ClaimBatch] and
// [Store.CompleteBatch] run one transition per entry, one after the other
// ([storage.ClaimEach]): a batch of n keys costs n Paxos rounds.
//
// # Limits
//
// Keys are at most [MaxKeyLen] bytes, fingerprints at most
// [MaxFingerprintLen], leases and retentions at most a year (Cassandra 4
// and 5 in their default storage mode refuse an expiry past 2038), and
// values at most Config.MaxValueSize (default 1 MiB, at most
// [MaxValueSizeLimit]): a longer value gets a [*storage.ValueTooLargeError]
// before anything is sent. [Store.MaxValueSize] tells a caller (the HTTP
// middleware) the limit so that it never hands the store a value it must
// refuse.
//
// # Errors
//
// Sentinels of package idem as the Store contract says; ErrUnknownFormat
// for a row this package did not write (left unchanged); ErrInvalidArgs;
// *storage.ValueTooLargeError (all three refusals of one key,
// storage.ErrRefused); ErrContention (wrapping storage.ErrStoreUnavailable)
// when a record keeps changing under a call. Everything else from the
// driver (no host reachable, timeouts, a node unavailable, overloaded or
// bootstrapping, a missing table, authentication) wraps
// storage.ErrStoreUnavailable, with the driver's error in the chain.
package cassandrastore
