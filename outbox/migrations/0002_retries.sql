-- Per-row retries and dead rows. A row whose publication failed waits
-- until its next_attempt_at, and only its key waits with it; a row that
-- failed for good (a permanent error, or RelayConfig.MaxAttempts
-- failures) moves to the dead rows' table, {{.dead}}, until an operator
-- redrives it (outbox.Redrive) or discards it (outbox.Discard).

-- Added only when missing: ALTER TABLE would take the table's exclusive
-- lock at every Migrate.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = '{{.table}}'::regclass AND attname = 'next_attempt_at' AND NOT attisdropped) THEN
        -- NULL for a row never failed; else the row (and the later rows
        -- of its key) is not published before this time.
        ALTER TABLE {{.table}} ADD COLUMN next_attempt_at timestamptz;
    END IF;
END
$$;

-- The keys waiting out a row's backoff: the rows that failed and are
-- still pending, few when all goes well.
CREATE INDEX IF NOT EXISTS {{.retry_idx}} ON {{.table}} (key_hash)
    WHERE sent_at IS NULL AND next_attempt_at IS NOT NULL;

-- The dead rows: the columns of {{.table}} (same id, kept by outbox.Redrive),
-- the failures and when the row died.
CREATE TABLE IF NOT EXISTS {{.dead}} (
    id           bigint      PRIMARY KEY,
    message_id   text        NOT NULL,
    destination  text        NOT NULL,
    key          bytea       NOT NULL,
    key_hash     bigint      NOT NULL,
    headers      bytea,
    payload      bytea       NOT NULL,
    created_at   timestamptz NOT NULL,
    attempts     integer     NOT NULL,
    last_error   text,
    dead_at      timestamptz NOT NULL DEFAULT statement_timestamp()
);
