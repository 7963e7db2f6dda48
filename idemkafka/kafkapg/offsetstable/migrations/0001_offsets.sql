-- The offsets table of kafkapg: one row per consumer group, topic and
-- partition, holding the next offset to consume. It is written in the
-- transaction that stores the records' outcomes, and read when a
-- partition is assigned. {{.table}} is a validated, quoted identifier.
-- Every migration is idempotent: Migrate runs them all, in order, each
-- time.

CREATE TABLE IF NOT EXISTS {{.table}} (
    consumer_group text    NOT NULL,
    topic          text    NOT NULL,
    partition      integer NOT NULL,
    next_offset    bigint  NOT NULL,
    leader_epoch   integer NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, partition)
);
