-- The records table of pgstore: one row per store key.
-- The table, index and sequence names are text/template actions, rendered
-- as validated, quoted identifiers (as in queries.sql).
-- Every migration is idempotent: Migrate runs them all, in order, each time.
-- The columns have no CHECK constraints: PostgreSQL reads a table's CHECK
-- expressions back from their stored text and plans them in every
-- statement that writes a row, a fifth to a quarter of the server's work
-- for a claim and its outcome (pgstore/README.md). Only pgstore's statements write
-- here, with literal statuses and attempts counted from 1.

CREATE TABLE IF NOT EXISTS {{.table}} (
    -- The store key (idem.StoreKey: namespace and key). bytea, not text:
    -- keys may hold any byte, NUL included, and compare byte for byte.
    key          bytea       PRIMARY KEY,
    -- 1 InProgress, 2 Completed, 3 Failed (idem.Status).
    status       smallint    NOT NULL,
    -- The current claim's fencing token, from {{.seq}} (ClaimBatch: random);
    -- 0 once released.
    token        bigint      NOT NULL,
    attempt      integer     NOT NULL,   -- from 1
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

CREATE INDEX IF NOT EXISTS {{.index}} ON {{.table}} (expires_at);

-- Tokens are never reused, not even for a key whose record expired and was
-- created again.
CREATE SEQUENCE IF NOT EXISTS {{.seq}} AS bigint;
