// Command faults is idem's fault suite: it runs consumer processes against
// a real broker and a real store, kills them with SIGKILL at every point of
// a message's handling, crashes and restarts the store and Kafka's nodes,
// terminates the consumers' PostgreSQL backends and cuts their broker
// connections, and counts the side effects in a PostgreSQL ledger: exactly
// one per message where idem promises it, and no message lost anywhere.
// FAULTS.md at the root of the repository holds the table of runs and
// what each kill point does to each store and mode.
//
//	make faults                                          # every profile run: under 15 minutes
//	cd integration && go run ./faults -profile short     # what make test runs (TestShortProfile; Kafka: pgtx-tx only)
//	cd integration && go run ./faults -run 'nats/pg'     # the runs whose name matches
//	cd integration && go run ./faults -broken no-fence   # a broken consumer: the suite fails
//	cd integration && go run ./faults -brokers '' -run 'failover|partition'   # the failover and partition runs only
//
// # A run
//
// A run starts K consumer processes (this same binary, `faults consume`),
// publishes N messages, a quarter of them twice, over a few seconds, and
// meanwhile injects its faults at random moments. Each consumer process
// consumes through the broker's idem adapter (idemnats, idemamqp,
// idemkafka) with a Guard over the run's store, or on Kafka in tx mode
// through kafkapg, and kills itself at the point and count the harness
// gave it:
//
//	before-claim    a delivery arrived; its key is not claimed
//	after-claim     RabbitMQ: its key is claimed, in a batch ahead of the workers; the handler has not run
//	before-effect   the key is claimed and the handler runs; no side effect yet
//	after-effect    the side effect is applied (tx mode: written in the transaction, not committed)
//	after-commit    tx mode: the transaction with the effect and the outcome committed (kafkapg: and the offset)
//	after-outcome   the outcome is stored; the message is not acked
//
// and the harness SIGKILLs a random process at random moments too. A dead
// process is replaced at once. A run ends when the broker holds no unacked
// message: nothing is in flight then, and nothing will be delivered again.
// On Kafka that is every partition's committed offset (kafkapg: the offset
// stored in PostgreSQL) at its end offset.
//
// Kafka is an Apache Kafka cluster the harness starts for each run: three
// KRaft nodes (each broker and controller), each the process of
// `scripts/kafka.sh run DIR` (found in the working directory or above it,
// or at $IDEMFAULTS_KAFKA_SH; the Kafka runs fail if Apache Kafka is not
// installed: run scripts/services.sh), on loopback ports of the run's own
// with its data in the run's directory, never the machine's shared broker.
// The run's topic has 6 partitions, each replicated on every node, with
// min.insync.replicas=2; the harness publishes with acks=all and franz-go's
// idempotent producer, so a crash neither loses an acknowledged record
// nor writes a retried one twice, and the run fails if the topic does not
// hold exactly the records published. Each node advertises the address of
// the harness's proxy in front of it to clients, so the consumers, which
// connect to the brokers the metadata names, reach every node through a
// proxy the harness can cut; the nodes replicate on a listener no proxy
// cuts.
//
// Meanwhile the harness crashes Kafka itself: it SIGKILLs the node leading
// a partition of the run's topic, while records flow, starts it again on
// the same ports with the same data, and goes on once the node answers and
// every replica is in sync again (a few seconds). The partitions it led,
// and the group's coordinator if it was there, move to the others, and
// producer and consumers find the new leaders.
//
// The stores: pgstore (records in PostgreSQL), pgstore's TxGuard (the side
// effect and the outcome in one transaction), redisstore on a
// redis-server the harness starts on a port of its own (with appendonly
// and appendfsync always, or without appendonly: a restart loses every
// record), and memstore (one process; its records die with it). The side
// effect is a row in the ledger's effects table: unfenced (one more row,
// whatever happened before), fenced (the row is written only by the
// statement that records the key's fencing token, so a second holder
// finds the effect applied under another token and does not apply it), or
// in the TxGuard's transaction.
//
// # What is asserted
//
// Every message has at least one effect and is acked; nothing is
// dead-lettered. Exactly-once configurations (tx, fenced) have exactly one
// effect per message. A duplicate effect (unfenced) or a fence refusal
// (fenced) is allowed only for a key whose window, from just before its
// side effect to its stored outcome (with memstore: its ack), was open when
// its process died, or whose side effect or outcome write failed with an
// unknown result (a terminated backend, a restarted Redis), or whose
// stored outcome a Redis restart lost; one per such event. A Kafka crash
// opens no window of its own: it cuts connections, moves leaders and
// rebalances the group, and what comes again is answered from the store. Redis with
// appendfsync always loses no stored outcome in a restart; without
// appendonly, the outcomes it lost and when they were stored are reported.
// Every kill point of the run's mode is hit at least once.
//
// # Failover and partition runs
//
// Beside the broker runs, the suite runs replicated stores of its own and
// fails them over (failover.go): a Redis primary with two replicas and
// three Sentinels (`redis-server --sentinel`), the workers on go-redis's
// failover client; or a PostgreSQL primary with a streaming standby
// (initdb, pg_basebackup -R; run as the postgres user when the harness is
// root), the workers on a pool whose URL names both servers with
// target_session_attrs=read-write. Each replica streams from its primary
// through a link of the harness's (link.go) that delays every byte each
// way, so a replica is behind when its primary dies; the bytes the link
// holds when the primary dies are dropped with it. Sixteen workers in the
// harness's process run Guard.Do (or TxGuard.Do) over a few thousand keys,
// each applying its side effect to the ledger; at 40% the harness SIGKILLs
// the primary (PostgreSQL: its whole process group, then pg_ctl promote),
// the workers retry until each key's Do succeeds, and then every key is
// delivered again. A run counts the outcomes Do had returned that the
// failover lost (the key's fn ran again), duplicate effects, each of which
// must be on a key with a lost outcome or in flight at the kill, keys
// without an effect, and the time from the kill to the first fn that ran
// and stored its outcome. WaitReplicas 1 (with min-replicas-to-write 1) and
// a synchronous standby must lose no returned outcome.
//
// The partition runs (partition.go) cut one worker off from its store
// (Redis of the run's own, or the harness's PostgreSQL) while it holds a
// key, for 2.5 times the lease: the link stops forwarding and holds its
// connections open, a blackhole, not a close. Another worker takes the key
// over once the lease has run out on the store's clock. The run checks
// that the cut-off holder's local deadline cancelled its handler before
// the other's started, that its late fenced effect is refused, that its Do
// returns ErrLeaseLost, and that every key has one effect.
//
// The consumer has broken builds, chosen with -broken, each of which
// breaks one rule and must make the suite fail: ack-first (acks before
// the handler runs, so before the outcome is stored: messages lost),
// no-fence (fenced mode without the token check: duplicates) and
// effect-outside-tx (tx mode with the effect written outside the
// transaction: duplicates).
//
// Environment: IDEM_POSTGRES_URL and the brokers' variables (IDEM_NATS_URL,
// IDEM_AMQP_URL) as for the tests; IDEMFAULTS_KAFKA_SH names
// scripts/kafka.sh; IDEMFAULTS_KEEP=1 keeps each run's ledger schema,
// consumer logs, event log (with the crashes: which node, how long it took
// to come back) and Kafka nodes' logs and data.
package main
