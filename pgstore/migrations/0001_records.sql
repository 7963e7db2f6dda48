-- The records table of pgstore: one row per store key.
-- {table}, {index} and {seq} are replaced by validated, quoted identifiers.
-- Every migration is idempotent: Migrate runs them all, in order, each time.

CREATE TABLE IF NOT EXISTS {table} (
    -- The store key (idem.StoreKey: namespace and key). bytea, not text:
    -- keys may hold any byte, NUL included, and compare byte for byte.
    key          bytea       PRIMARY KEY,
    -- 1 InProgress, 2 Completed, 3 Failed (idem.Status).
    status       smallint    NOT NULL CHECK (status IN (1, 2, 3)),
    -- The current claim's fencing token, from {seq}; 0 once released.
    token        bigint      NOT NULL,
    attempt      integer     NOT NULL CHECK (attempt > 0),
    fingerprint  bytea       NOT NULL,
    -- InProgress: when the holder's lease ends. NULL on an outcome.
    lease_until  timestamptz,
    -- The claim's retention, so that Extend can keep the record that long
    -- after the lease it extends.
    retention    interval    NOT NULL,
    -- Completed: the value. Failed: the encoded permanent error.
    result       bytea,
    -- When the record is forgotten: Claim treats the row as absent from
    -- then on, and Reap deletes it.
    expires_at   timestamptz NOT NULL
) WITH (fillfactor = 90); -- room on the page for the in-place (HOT) rewrite of a claim that finds a record

CREATE INDEX IF NOT EXISTS {index} ON {table} (expires_at);

-- Tokens are never reused, not even for a key whose record expired and was
-- created again.
CREATE SEQUENCE IF NOT EXISTS {seq} AS bigint;
