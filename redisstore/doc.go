// Package redisstore keeps idem's records in Redis, for services whose
// replicas share one store: a [Store] over any go-redis
// redis.UniversalClient, so one constructor serves a standalone server,
// Sentinel and Cluster.
//
//	client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}})
//	store, err := redisstore.New(client, redisstore.Config{})
//	g, err := idem.New(store, idem.Config{Namespace: "payments"})
//
// It needs Redis 7.0 or later (script flags, PEXPIRETIME).
//
// # One key per record
//
// A record lives in one Redis string key: Config.Prefix, then the store key
// in unpadded base64url between braces ("idem:{BnBheW1…}"). The store key
// may hold any bytes; base64url is injective and never contains a brace, so
// no key can address another's record, and the braces make the encoded key
// the Cluster hash tag: each record is a single-slot key. (Hex would do the
// same at 1.5 times the length; a length-prefixed raw key could contain
// '}' and move the hash tag.)
//
// The value is a compact binary record, not JSON: a 24-byte header (format
// version, status, token, attempt, and the claim's retention in
// milliseconds or, once the record is finished, its expiry), the
// fingerprint and the result, packed by the client. A value of another
// version, or one another program wrote, is refused with [ErrUnknownFormat]
// and never changed. A finished record's key expires its retention after
// the outcome was stored; the record holds that expiry as the client that
// stored the outcome reckoned it, so that the record is all in the value
// (see the next section).
//
// # The lease is the key's expiry
//
// An InProgress record's key expires the claim's retention after its
// lease ends, so the lease end needs no field of its own: it is the expiry
// less the retention, and the lease is live while the key has more than
// the retention left to live. Claim sets the expiry with PX (lease plus
// retention from now), Extend with PEXPIRE, Release ends the lease by
// setting it to the retention from now, and a takeover compares PTTL with
// the retention. Every one of them is the Redis server's clock, never the
// caller's, as with TIME — but no script needs TIME or any arithmetic on
// the common path, and the claim of a new key is the one command a bare
// Redis lock would send, SET NX PX. Leases and retentions are whole milliseconds, rounded
// up. An operator who changes a record key's TTL by hand (EXPIRE, PERSIST)
// moves its lease with it.
//
// The claim of a new key answers only that it succeeded; the Claim's
// record then reports the lease end and the expiry as the client reckons
// them, from the moment it sent the claim, on its own clock. Get reads
// both from the server for a record in progress.
//
// # Plain commands first, one script per transition
//
// A claim starts with a plain command: SET key record NX PX ms, which
// claims a new key. A key that has a record keeps it (SET … NX writes
// nothing), and the claim then reads the value with GETRANGE, cut after
// the longest record it would answer (header, the claim's fingerprint, a
// result of MaxValueSize): a duplicate's Claim returns the stored
// outcome, expiry and all, from two plain commands, and a reused key or a
// value of another program is answered from them too, by the same rules
// the claim script follows. (SET … GET would answer a duplicate in one
// step, but sends the whole value, however long: a value another program
// wrote could cost every claim of its key its whole size.) A script call
// costs the Redis server several times a command, and these are a claim's
// common cases. Only a key in progress needs the claim script, in a
// second round trip: whether its lease is live is for the server's clock
// to judge, and the script decides atomically (Busy, a takeover, the
// attempt cap). Complete, Fail, Release, Extend and Get are each one
// EVALSHA of a Lua script that touches only the record's key, so every
// transition is atomic on the server and each call is one round trip. The scripts
// are cached by the server; after a restart or SCRIPT FLUSH, the first
// call that meets NOSCRIPT sends the script itself with EVAL (a NOSCRIPT
// reply means nothing ran).
//
// Tokens are 64 random bits drawn in the calling process (never zero), so
// they owe nothing to state Redis could lose: a token does not come back
// for a key after its record expired or was lost (the odds that two claims
// draw the same one are 2^-64).
//
// go-redis resends a command whose reply was lost to a network error. A
// resent Claim is harmless: finding its own token it answers Acquired
// again. Complete, Fail and Release are never resent (a second run would
// answer ErrLeaseLost for the outcome the first stored): the caller gets
// storage.ErrStoreUnavailable, and a later Claim tells whether the outcome
// was stored.
//
// [Store.ClaimBatch] sends the plain command of every key in one
// pipeline, and the claim scripts of the keys in progress (and of any key
// an earlier entry of the batch names) in a second; [Store.CompleteBatch]
// sends its scripts in one pipeline. On Cluster, go-redis sends one
// pipeline per primary, in parallel. On a client of one server
// (standalone or Sentinel), the scripts claim and complete up to 128 keys
// each, in order, which spares Redis a script call per key; on Cluster,
// where keys live in different slots, they pipeline one single-key script
// per key. A Store keeps, for CompleteBatch, the record each of its
// ClaimBatch claims created (at most two generations of 16,384 and 8 MiB): the
// complete script then compares the whole record and writes the finished
// one as sent. A claim it did not keep is completed by its token.
//
// Errors from the client or the server are returned wrapping
// storage.ErrStoreUnavailable, with standard-library causes (context,
// network) kept for errors.Is; no go-redis type leaks through.
//
// # Deadlines and cancellation
//
// Every call returns when its context ends, whatever the client's options.
// go-redis notices neither a cancelled context nor, unless
// ContextTimeoutEnabled is set, a deadline, while it waits for a server
// that stopped answering; so each call exchanges its commands with Redis
// on a goroutine of its own and returns, with the context's error, as
// soon as the context ends. The exchange left behind ends within the
// client's ReadTimeout and WriteTimeout, which [New] therefore requires
// to be finite.
//
// # Redis must not evict
//
// Every record has a TTL, so under any volatile-* or allkeys-*
// maxmemory-policy a full Redis evicts records, and a duplicate of an
// evicted key runs again with no error anywhere. [New] reads the policy
// of every primary (INFO memory) and refuses anything but noeviction with
// an [EvictionPolicyError], unless Config.AllowEviction accepts the risk.
// It reads the policy again while it runs, on the first claim 10 seconds
// after the last check, and fails claims closed (storage.ErrStoreUnavailable)
// while the policy may evict.
// Under noeviction a full Redis refuses writes: the store then still
// answers a duplicate of a key that holds an outcome, and a Busy, with a
// read-only script, and fails what needs a write with [ErrOutOfMemory]
// (wrapping storage.ErrStoreUnavailable).
//
// # What Redis can lose
//
// Redis acknowledges a write once it is in the primary's memory. Two
// things can then lose a record that a caller was told is stored:
//
//   - A crash or restart of the primary loses whatever the disk does not
//     hold. With RDB snapshots only (the default), that is every record
//     since the last snapshot; with appendonly yes and appendfsync
//     everysec, about the last second; only appendfsync always (an fsync
//     per write, much slower) loses nothing the server acknowledged.
//   - Replication is asynchronous: a failover (Sentinel or Cluster)
//     promotes a replica that may not have received the last writes, and
//     they are gone.
//
// A lost InProgress record lets a duplicate run the operation while its
// first holder still runs it; a lost outcome lets a later duplicate run it
// again. If that is not acceptable, fence the side effect with the token
// (idem.TokenFrom) or keep the records in PostgreSQL with the side effects.
//
// To narrow the window: run the primary with appendonly yes and
// appendfsync always, and set Config.WaitReplicas so that every outcome
// write is followed, on the same connection and in the same round trip, by
// WAIT: the call returns [ErrNotReplicated] (the outcome is stored on the
// primary, not yet on enough replicas) when fewer replicas acknowledged it
// in Config.WaitTimeout, and the Guard then fails the call rather than
// report an outcome a failover may lose. WAIT makes a failover less likely
// to lose the write, not impossible (a replica that acknowledged can still
// lose the election), and it costs a replication round trip on every
// outcome. Claims are not followed by WAIT: a claim lost in a failover
// lets one duplicate in, which fencing the side effect with the token
// turns away.
package redisstore
