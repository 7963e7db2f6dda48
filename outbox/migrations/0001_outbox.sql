-- The outbox table: one row per message, from Enqueue until the relay has
-- published it (and, unless the relay deletes sent rows, until the
-- retention after that). Migrate renders each migration as a text/template
-- with the names of queries.sql: {{.table}}, {{.pending_idx}} and
-- {{.sent_idx}} are validated, quoted identifiers. Every migration is
-- idempotent: Migrate runs them all, in order, each time.

CREATE TABLE IF NOT EXISTS {{.table}} (
    -- Enqueue order: messages of one key are published in id order.
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The message's ID, its consumer's idempotency key downstream. Not
    -- unique here: the same ID enqueued twice is published twice, and the
    -- next hop drops the second.
    message_id   text        NOT NULL,
    destination  text        NOT NULL,
    -- The ordering key, any bytes.
    key          bytea       NOT NULL,
    -- FNV-1a (32 bits) of key, or of message_id when key is empty: the
    -- message's partition is key_hash modulo the relays' partition count.
    key_hash     bigint      NOT NULL,
    -- NULL, or the encoding of outbox.DecodeHeaders.
    headers      bytea,
    payload      bytea       NOT NULL,
    -- The database's clock at Enqueue.
    created_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    -- NULL while pending; when a relay published the row.
    sent_at      timestamptz,
    -- Failed publications of this row, and the last one's error.
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text
);

-- The relay reads pending rows in id order, and only those.
CREATE INDEX IF NOT EXISTS {{.pending_idx}} ON {{.table}} (id) WHERE sent_at IS NULL;

-- The clean-up finds the sent rows past their retention.
CREATE INDEX IF NOT EXISTS {{.sent_idx}} ON {{.table}} (sent_at) WHERE sent_at IS NOT NULL;
