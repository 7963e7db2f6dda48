-- Every SQL statement the outbox sends, but the migrations
-- (migrations/*.sql), as text/template definitions rendered once per table:
-- by New for an Outbox, by NewRelay for a Relay, and by Dead, Redrive,
-- Discard and ReadLag for the table they are given.
--
-- Each definition is rendered with a map: table and dead are the outbox
-- table and its dead rows' table, channel the LISTEN/NOTIFY channel
-- (validated, quoted identifiers; the channel is outbox_ and hex digits).
-- A Relay's statements take its configuration's numbers as arguments,
-- formatted by the package (args . "key" "value", or Render's pairs).
-- Nothing of a caller's ever enters the text but through $n parameters.
-- Comments stay out of the definitions, so that the server is not sent
-- them, and hold no template actions.
--
-- Time is statement_timestamp(): the start of the statement, the same for
-- every row it touches.

-- ---------------------------------------------------------------------------
-- Enqueue
-- ---------------------------------------------------------------------------

-- One message: $1 message_id, $2 destination, $3 key, $4 key_hash,
-- $5 headers, $6 payload.
{{define "insert_one"}}INSERT INTO {{.table}} (message_id, destination, key, key_hash, headers, payload)
VALUES ($1, $2, $3, $4, $5, $6){{end}}

-- Several messages, in the order given: the same columns as arrays.
{{define "insert_many"}}INSERT INTO {{.table}} (message_id, destination, key, key_hash, headers, payload)
SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::int8[], $5::bytea[], $6::bytea[]){{end}}

-- Config.Notify: wakes the relays listening once the transaction commits.
{{define "notify"}}SELECT pg_notify('{{.channel}}', ''){{end}}

-- ---------------------------------------------------------------------------
-- The relay's session
-- ---------------------------------------------------------------------------

{{define "listen"}}LISTEN "{{.channel}}"{{end}}

-- A batch: the first pending rows in id order, but those of inFlight ($1),
-- and those of keys (key_hash: a collision makes another key wait too) of
-- which a row waits out its backoff, through the small index of the failed
-- rows; then the longest run of them whose payloads add up to at most
-- max_batch_bytes, or the first alone. octet_length reads a TOASTed
-- payload's size without reading the payload. Arguments: where, what else
-- a row must be; limit, the parameter of the batch size.
{{define "batch"}}SELECT id, message_id, destination, key, headers, payload, created_at
FROM (SELECT *, sum(size) OVER w AS upto, row_number() OVER w AS n
	FROM (SELECT id, message_id, destination, key, headers, payload, created_at, octet_length(payload) AS size
		FROM {{.table}}
		WHERE sent_at IS NULL AND id <> ALL($1::int8[]){{.where}}
			AND key_hash NOT IN (SELECT key_hash FROM {{.table}}
				WHERE sent_at IS NULL AND next_attempt_at IS NOT NULL AND next_attempt_at > statement_timestamp())
		ORDER BY id LIMIT {{.limit}}) AS b
	WINDOW w AS (ORDER BY id)) AS w
WHERE upto <= {{.max_batch_bytes}} OR n = 1
ORDER BY id{{end}}

-- A relay that holds every partition: $1 in flight, $2 batch size.
{{define "fetch_all"}}{{template "batch" args . "where" "" "limit" "$2"}}{{end}}

-- A relay that holds some: $1 in flight, $2 the partition count, $3 the
-- partitions held, $4 batch size.
{{define "fetch"}}{{template "batch" args . "where" " AND key_hash % $2 = ANY($3::int8[])" "limit" "$4"}}{{end}}

-- Published rows, $1 their ids: marked sent, or (RelayConfig.DeleteSent)
-- deleted.
{{define "mark"}}UPDATE {{.table}} SET sent_at = statement_timestamp() WHERE id = ANY($1::int8[]) AND sent_at IS NULL{{end}}

{{define "mark_delete"}}DELETE FROM {{.table}} WHERE id = ANY($1::int8[]){{end}}

-- The rows that failed ($1 ids, $2 errors, $3 whether for good), for good
-- or for the last allowed time (max_attempts), move to the dead rows (ON
-- CONFLICT: a row redriven and dead again replaces its old copy, which
-- Redrive deleted anyway).
{{define "kill"}}WITH f AS (SELECT * FROM unnest($1::int8[], $2::text[], $3::bool[]) AS f(id, err, permanent)),
d AS (DELETE FROM {{.table}} AS o USING f
	WHERE o.id = f.id AND o.sent_at IS NULL AND (f.permanent OR o.attempts + 1 >= {{.max_attempts}})
	RETURNING o.id, o.message_id, o.destination, o.key, o.key_hash, o.headers, o.payload, o.created_at, o.attempts + 1, f.err)
INSERT INTO {{.dead}} AS x (id, message_id, destination, key, key_hash, headers, payload, created_at, attempts, last_error)
SELECT * FROM d
ON CONFLICT (id) DO UPDATE SET attempts = excluded.attempts, last_error = excluded.last_error, dead_at = excluded.dead_at{{end}}

-- The others ($1 ids, $2 errors) wait min_backoff seconds doubled at each
-- failure, at most max_backoff, the upper half of it at random, as the
-- relay's own backoff.
{{define "record_failures"}}UPDATE {{.table}} AS o SET attempts = o.attempts + 1, last_error = f.err,
	next_attempt_at = statement_timestamp()
		+ make_interval(secs => least({{.max_backoff}}, {{.min_backoff}} * power(2, least(o.attempts, 40))) * (0.5 + random() / 2))
FROM unnest($1::int8[], $2::text[]) AS f(id, err)
WHERE o.id = f.id AND o.sent_at IS NULL{{end}}

-- The sent rows past the retention (retention_us microseconds), at most
-- cleanup_batch. Constants, not parameters: planned with the retention, it
-- finds the rows past it through the sent rows' index.
{{define "cleanup"}}DELETE FROM {{.table}} WHERE id IN (SELECT id FROM {{.table}}
	WHERE sent_at < statement_timestamp() - interval '{{.retention_us}} microseconds'
	LIMIT {{.cleanup_batch}} FOR UPDATE SKIP LOCKED){{end}}

-- The backlog: pending rows, the age of the oldest, dead rows.
{{define "lag"}}SELECT count(*), coalesce(statement_timestamp() - min(created_at), '0'), (SELECT count(*) FROM {{.dead}})
FROM {{.table}} WHERE sent_at IS NULL{{end}}

-- ---------------------------------------------------------------------------
-- Partitions: session-level advisory locks of two int4 keys, $1 the
-- table's lock class (see partitions.go)
-- ---------------------------------------------------------------------------

-- $2 the member key: held shared for as long as the session lives.
{{define "join"}}SELECT pg_advisory_lock_shared($1::int4, $2::int4){{end}}

-- $1 the class (as int8), $2 this relay's member key (as int8): how many
-- relays run with the same partition count, and the highest member key
-- (that of the smallest count). pg_locks shows the two keys as oids: -n as
-- 2^32-n. Partition keys are below 2^31, member keys above.
{{define "members"}}SELECT count(DISTINCT pid) FILTER (WHERE objid::int8 = $2),
	coalesce(max(objid::int8) FILTER (WHERE objid::int8 >= 2147483648), $2)
FROM pg_locks
WHERE locktype = 'advisory' AND objsubid = 2 AND granted AND classid::int8 = $1
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database()){{end}}

-- $2 the partitions given up.
{{define "release"}}SELECT bool_and(pg_advisory_unlock($1::int4, p)) FROM unnest($2::int4[]) AS p{{end}}

-- $2 the candidates, in order, $3 how many to take. A Limit over a
-- function scan pulls rows one at a time: the lock is tried on candidates
-- only until enough were taken.
{{define "acquire"}}SELECT p FROM unnest($2::int4[]) AS p WHERE pg_try_advisory_lock($1::int4, p) LIMIT $3{{end}}

-- ---------------------------------------------------------------------------
-- Dead rows
-- ---------------------------------------------------------------------------

-- The oldest dead rows first, at most $1, and the longest run of them whose
-- payloads add up to at most $2 bytes, or the first alone: octet_length
-- reads a TOASTed payload's size without reading the payload, so the rows
-- past the bound cost no payload read.
{{define "dead_rows"}}SELECT id, message_id, destination, key, headers, payload, created_at, attempts, last_error, dead_at
FROM (SELECT *, sum(size) OVER w AS upto, row_number() OVER w AS n
	FROM (SELECT id, message_id, destination, key, headers, payload, created_at, attempts, coalesce(last_error, '') AS last_error,
			dead_at, octet_length(payload) AS size
		FROM {{.dead}} ORDER BY id LIMIT $1) AS d
	WINDOW w AS (ORDER BY id)) AS w
WHERE upto <= $2 OR n = 1
ORDER BY id{{end}}

-- $1 ids: back in the outbox table as pending, with their ids.
{{define "redrive"}}WITH d AS (DELETE FROM {{.dead}} WHERE id = ANY($1::int8[])
	RETURNING id, message_id, destination, key, key_hash, headers, payload, created_at, last_error)
INSERT INTO {{.table}} (id, message_id, destination, key, key_hash, headers, payload, created_at, last_error)
OVERRIDING SYSTEM VALUE SELECT * FROM d{{end}}

-- $1 ids.
{{define "discard"}}DELETE FROM {{.dead}} WHERE id = ANY($1::int8[]){{end}}
