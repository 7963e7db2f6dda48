// Package outbox is a transactional outbox on PostgreSQL (pgx v5): a
// service writes its state change and the messages that announce it in one
// database transaction, and a [Relay] publishes the messages afterwards.
// Either both the change and its messages commit, or neither does; no
// message is lost to a crash between the commit and the publish, and none
// announces a change that was rolled back.
//
//	tx, _ := pool.Begin(ctx)
//	_, _ = tx.Exec(ctx, "INSERT INTO orders …")
//	_ = outbox.Enqueue(ctx, tx, outbox.Message{
//		ID:          "order-" + orderID, // the consumer's idempotency key
//		Destination: "orders.created",   // a subject, a topic, a routing key
//		Key:         accountID,          // messages of a key stay in order
//		Payload:     body,
//	})
//	_ = tx.Commit(ctx)
//
// [Migrate] creates the table. [Enqueue] writes to [DefaultTable]; an
// [Outbox] from [New] writes to another, or with a NOTIFY.
//
// # With idem
//
// The relay publishes at least once: it can crash after the broker took a
// message and before it marked the row sent, and then the message is
// published again, with the same [Message.ID]. Publishers put the ID where
// the next hop deduplicates (NATS Nats-Msg-Id, the AMQP message-id, a Kafka
// header), and a consumer guarded by idem with the ID as its key processes
// it once. Upstream, pgstore's TxGuard.DoTx composes with Enqueue: an
// idempotent request claims its key, writes its order and enqueues its
// message in one transaction, so a retried request neither writes a second
// order nor sends a second message:
//
//	tx, _ := pool.Begin(ctx)
//	res, err := txGuard.DoTx(ctx, tx, key, body, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
//		id, err := insertOrder(ctx, tx, order)
//		if err != nil {
//			return nil, err
//		}
//		return []byte(id), outbox.Enqueue(ctx, tx, outbox.Message{ID: "charge-" + id, …})
//	})
//	… tx.Commit(ctx)
//
// Code written against database/sql does the same with pgstore's
// SQLTxGuard and [EnqueueSQL], which take a *sql.Tx.
//
// # The relay
//
// A [Relay] reads pending rows in id order, a batch at a time, hands them
// to a [Publisher], and marks those the broker accepted as sent with its
// next read (one round trip for both); RelayConfig.DeleteSent deletes them
// instead. While the broker takes a full batch, the relay already marks
// the batch before and reads the next, so the database's work hides
// behind the broker's. Its session runs with synchronous_commit off: a
// mark lost with the server's last transactions in a crash only means
// the message is published again; and with plan_cache_mode
// force_generic_plan, so that its prepared statements, whose plans do not
// depend on their parameters, are planned once rather than at every
// execution. Sent rows are deleted after
// RelayConfig.Retention. An idle relay polls every
// RelayConfig.PollInterval (100ms by default), and wakes at once on the
// NOTIFY of a transaction that enqueued with Config.Notify.
//
// Enqueue does not notify by default: PostgreSQL serializes the commits of
// transactions that sent a NOTIFY (a database-wide lock held through the
// commit and its WAL flush), which queues concurrent enqueuing
// transactions behind one another and would cap every notifying writer of
// the database at one commit per WAL flush. Polling costs an idle relay
// one indexed read per interval, and an idle outbox at most PollInterval
// of latency (50ms on average by default). Config.Notify buys that latency back where writers are few.
//
// When no message of a batch is accepted because the broker cannot be
// reached, it backs off, exponentially with jitter, for as long as that
// lasts. A batch holds at most RelayConfig.BatchSize
// rows and RelayConfig.MaxBatchBytes (4 MiB) of payload, and at least one
// row; [Enqueue] refuses a payload over Config.MaxPayload (1 MiB by
// default) with [ErrTooLarge], so that the relay's memory stays bounded.
// The backlog (pending count, age of the oldest, dead rows) goes to
// RelayConfig.Observer every RelayConfig.LagInterval, and [Relay.Lag]
// reads it on demand.
//
// # Failed rows and dead rows
//
// A failure counts as an attempt of a message only if it says something
// about the message: a refusal of a broker that answered. A failure that
// says the broker could not be reached (the Publisher wrapped it with
// [Unavailable]: a dial error, a lost connection, a cluster without a
// leader), or a message that got no answer before
// RelayConfig.PublishTimeout, is not the message's: its row is not
// charged, keeps no error and waits out no backoff of its own. The relay
// backs off as a whole instead, and tries again; OpPublish events count
// such failures (Event.Unavailable), OpBackoff events and the log say
// why. So during a broker outage, however long, an operator sees the
// backlog grow (Lag.Pending, Lag.OldestPending), the backoffs and the
// warnings, and no dead row; once the broker is back the relay publishes
// the backlog, each key's in order, and nobody redrives anything.
//
// A row whose publication was refused records the attempt (attempts,
// last_error) and waits out a backoff of its own (next_attempt_at:
// MinBackoff doubled at each failure, at most MaxBackoff, with jitter).
// While it waits, the later rows of its key wait too, and every other key
// is published: a batch is read without the keys that wait, so rows the
// broker keeps refusing never fill it, and the relay itself does not wait
// after a batch the broker refused (no OpBackoff), so a message of another
// key is published at the next read. Of the failed messages of a key in
// one Publish, only the first is charged an attempt: the later ones failed
// behind it.
//
// A row refused RelayConfig.MaxAttempts times (50 by default: with the
// default backoffs, four to seven minutes of refusals), or once with an error
// its Publisher wrapped with [Permanent] (too large, a destination that
// does not exist, not authorised), is dead: the relay moves it to the
// table's dead rows, <table>_dead, with its last error, reports it (OpDead,
// Lag.Dead) and goes on. The later messages of its key do not wait for
// it: they are published as if it had been. A dead row waits for an
// operator, who may take minutes or weeks: holding its key back until then
// would stop that key's messages (and, sharing a key_hash, a few others')
// for as long, and a message the broker refuses for good is a message the
// consumers will not see in order anyway. So a dead message is a gap in
// its key's order, and the events, the logs and [Dead] say where. [Redrive]
// puts a dead row back, with its id, once the cause is mended: it is
// published after the messages of its key that went on without it.
// [Discard] deletes it.
//
// # Several relays, and the order of a key's messages
//
// Run as many relays on a table as there are replicas of the service. The
// table's keys are hashed (FNV-1a of [Message.Key]) into a fixed number of
// partitions, RelayConfig.Partitions (16 by default, the same for every
// relay of the table). Each partition is published by at most one relay at
// a time: the holder of a session-level advisory lock on (a hash of the
// table's name, the partition). Every relay also holds a shared "member"
// lock, so that each can count the others in pg_locks; every
// RelayConfig.RebalanceInterval it takes or gives up partitions to hold
// ceil(partitions / relays) of them. The locks belong to the relay's own
// connection: when a relay stops, crashes or loses its connection, its
// partitions are free the moment PostgreSQL sees the session end, and the
// others take them at their next rebalance. A relay gives a partition up
// only after it has marked what it published from it.
//
// Within a partition the relay publishes in id order. Every read starts
// from the first pending row (skipping only the batch being published), so
// a row whose transaction drew its id early and committed late is still
// read before the later messages of its key; after a failure, the relay
// starts again from the first unpublished row; [Publisher] implementations
// keep the order of one call (see its documentation). A key's messages
// therefore reach the broker in the order of their ids, through broker
// outages, relay crashes and rebalances. Were two relays ever to publish a
// partition at once (a relay whose session ended while it was publishing
// a batch), each would still publish the key's pending messages in order,
// and the first copy of every message reaches the broker after the first
// copy of the one before it: the order survives, with duplicates the next
// hop drops.
//
// What "in order" means across transactions: ids are drawn when a row is
// inserted, and rows become visible when their transaction commits. Of two
// transactions that enqueue for the same key, one of which began after the
// other committed, the later one's messages are published after the
// earlier one's. Two transactions that overlap are not ordered: whichever
// commits first may be published first. Serialize the writers of a key
// (a row lock on the entity it names) when that matters.
//
// The limits of the design: a relay needs a session of its own (a pooler in
// transaction mode breaks advisory locks and LISTEN); a dead row's later
// messages go on without it (see above); a row waiting out its backoff
// holds back the keys that share its key_hash (32 bits: rarely another);
// and partitions bound how many relays share the work.
//
// # The table
//
// One row per message (migrations/0001_outbox.sql, 0002_retries.sql): id
// (identity, the publication order), message_id, destination, key
// (bytea), key_hash, headers, payload, created_at, sent_at (NULL while
// pending), attempts and last_error (failed publications), next_attempt_at
// (NULL unless the row failed: not published before). The dead rows'
// table, <table>_dead, has the same columns but sent_at and
// next_attempt_at, and dead_at. [Migrate] upgrades a table of an earlier
// version in place. headers is NULL or a version byte (1),
// the number of headers as a uvarint, then each header, sorted by name, as
// its name and its value, each a uvarint length and the bytes;
// [DecodeHeaders] reads it.
package outbox
