-- The checkout's own tables, in the schema of -schema. Idempotency
-- records (pgstore.Migrate) and the outbox (outbox.Migrate) live beside
-- them.

CREATE TABLE IF NOT EXISTS orders (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account         text        NOT NULL,
    customer        text        NOT NULL,
    amount_cents    bigint      NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- One row per charge made. Nothing here stops a second charge of an order:
-- that is idem's job, and the reconciliation query of the README counts.
CREATE TABLE IF NOT EXISTS charges (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id        bigint      NOT NULL,
    account         text        NOT NULL,
    amount_cents    bigint      NOT NULL,
    message_id      text        NOT NULL,
    charged_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS charges_order_id_idx ON charges (order_id);
