-- Every SQL statement pgstore sends, but the migrations (migrations/*.sql),
-- as text/template definitions rendered once per table by queries.go.
--
-- Each definition is rendered with a map: table, index and seq are the
-- records table, its expiry index and its token sequence (validated,
-- quoted identifiers). A fragment that differs between statements takes
-- its differences as arguments, added to the map by the function args
-- (args . "key" "value"). Nothing of a caller's ever enters the text but
-- through $n parameters. Comments stay out of the definitions, so that
-- the server is not sent them, and hold no template actions.
--
-- Statuses are literals: 1 InProgress, 2 Completed, 3 Failed (idem.Status).
-- Time is statement_timestamp(): the start of the statement, the same for
-- every row it touches, and not frozen inside a long transaction as now()
-- is.

-- ---------------------------------------------------------------------------
-- Claims
-- ---------------------------------------------------------------------------

-- The new record a claim proposes: $1 key, $2 fingerprint, $3 lease, $4
-- retention; the token drawn from the sequence.
{{define "insert_claim"}}INSERT INTO {{.table}} AS r
	(key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
VALUES ($1::bytea, 1, nextval('{{.seq}}'), 1, $2::bytea, statement_timestamp() + $3::interval, $4::interval, NULL,
	statement_timestamp() + $3::interval + $4::interval){{end}}

-- Whether a claim with the argument fingerprint takes over the record r:
-- it expired, or it is in progress with that fingerprint and its lease
-- was released or ran out. A claim that finds any other record (an
-- outcome, a live lease, another fingerprint) changes nothing: it answers
-- from the row. A record in progress always has a lease_until.
{{define "takeover"}}(r.expires_at <= statement_timestamp()
	OR (r.status = 1 AND r.fingerprint = {{.fp}}
		AND (r.token = 0 OR r.lease_until <= statement_timestamp()))){{end}}

-- The claim that reads first: $1 key, $2 fingerprint, $3 lease, $4
-- retention, $5 max attempts (0: no cap). One statement, one snapshot:
--
--   cur   the key's row as the snapshot has it, whether this claim takes
--         it over (take), and whether it would cap it (attempts
--         exhausted);
--   ins   no row, or one to take over under the cap: the insert of the new
--         record, whose conflict with the row is the takeover (DO UPDATE …
--         WHERE takeover, not capped): a new token, attempt + 1;
--
-- and the answer is the row ins returned, or cur's row when it is not to
-- be taken over (an outcome, a live lease, another fingerprint). That
-- claim writes nothing and locks nothing: ins has no row to insert, so
-- nothing conflicts. A duplicate costs a read, no transaction ID and no
-- commit record. An outcome never changes but by expiring or being
-- deleted, and a live lease is as the snapshot saw it when the statement
-- started: the answer is the record at that instant. The DO UPDATE's
-- WHERE and SET read the row's latest version, locked.
--
-- No row comes back when a concurrent claim got between the snapshot and
-- the write: the row ins conflicted with (inserted since the snapshot, or
-- changed since, its transaction waited for) is no longer to be taken
-- over. ins locked it all the same (a DO UPDATE locks the row whatever its
-- WHERE says): that race costs a row lock, never a duplicate that found
-- its record. The client then runs the statement again, with a new
-- snapshot that sees what changed (READ COMMITTED), and after a few runs
-- the full claim. A takeover over the cap, which stores
-- Failed(ErrTooManyAttempts), comes back as cur's row with status 0: the
-- full claim stores it, at once, rarely enough that its CASEs are not
-- worth setting up in every execution of this one.
--
-- One write, the insert, with the takeover's plain SET, and no UPDATE of
-- its own: the server sets up every data-modifying statement of a WITH,
-- and a DO UPDATE's expressions, on each execution, run or not. Counted
-- with scripts/bench-pg-instructions.sh, the cap's CASEs in the DO UPDATE
-- cost a replay 230k instructions of the server's, 209k without (a bare
-- SELECT of the row: 45k); an UPDATE beside the insert took a third more
-- of the server's CPU time.
--
-- Arguments: result, the columns of the row r's result (see
-- capped_result), named result (and result_size), and result_cols their
-- names; null_result, as many NULLs for a new record; restore, when not
-- empty, adds a last column, restore_lock_timeout, computed once the claim
-- has its row (and so after any wait: see set_lock_timeout).
{{define "read_first_claim"}}WITH cur AS MATERIALIZED (
	SELECT r.status, r.token, r.attempt, r.fingerprint = $2::bytea AS same, r.lease_until,
		{{.result}}, r.expires_at, coalesce({{template "takeover" args . "fp" "$2::bytea"}}, false) AS take,
		coalesce({{template "capped"}}, false) AS capped
	FROM {{.table}} AS r WHERE r.key = $1::bytea),
ins AS (
	INSERT INTO {{.table}} AS r
		(key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
	SELECT $1::bytea, 1, nextval('{{.seq}}'), 1, $2::bytea, statement_timestamp() + $3::interval, $4::interval, NULL,
		statement_timestamp() + $3::interval + $4::interval
	WHERE NOT EXISTS (SELECT FROM cur) OR (SELECT take AND NOT capped FROM cur)
	ON CONFLICT (key) DO UPDATE SET status = 1, token = excluded.token,
		attempt = CASE WHEN r.expires_at <= statement_timestamp() THEN 1 ELSE r.attempt + 1 END,
		fingerprint = excluded.fingerprint, lease_until = excluded.lease_until, retention = excluded.retention,
		result = NULL, expires_at = excluded.expires_at
	WHERE {{template "takeover" args . "fp" "excluded.fingerprint"}} AND NOT coalesce({{template "capped"}}, false)
	RETURNING r.token, r.attempt, r.lease_until, r.expires_at)
SELECT *{{if .restore}}, {{template "restore_lock_timeout"}}{{end}} FROM (
	SELECT 1::smallint, token, attempt, true, lease_until, {{.null_result}}, expires_at, true FROM ins
	UNION ALL
	SELECT status, token, attempt, same, lease_until, {{.result_cols}}, expires_at, false FROM cur WHERE NOT take
	UNION ALL
	SELECT 0::smallint, token, attempt, same, lease_until, {{.result_cols}}, expires_at, false FROM cur WHERE take AND capped
) AS claimed{{end}}

-- Whether a takeover of the record r by read_first_claim would cap it:
-- the record has not expired and its attempts reached $5, the claim's cap
-- (0: none).
{{define "capped"}}(r.expires_at > statement_timestamp() AND r.attempt >= NULLIF($5::int, 0)){{end}}

-- Store.Claim's claim: $6 the longest result returned.
{{define "claim_read"}}{{template "read_first_claim" args . "result" "CASE WHEN octet_length(r.result) <= $6::int THEN r.result END AS result, octet_length(r.result) AS result_size"
	"result_cols" "result, result_size" "null_result" "NULL::bytea, NULL::int" "restore" ""}}{{end}}

-- Store.Claim's peek, a plain read before the claim (Config.Peek): $1
-- key, $2 fingerprint; argument limit, the longest result returned, the
-- Store's Config.MaxValueSize as a literal (a validated integer). It
-- returns the row when the row answers the claim as it is (an outcome, a
-- live lease, another fingerprint) and holds a result within the limit,
-- and no row when the claim has to write (a new key, a takeover, an
-- attempt cap) or refuse the result: the claim statement follows then.
-- Its columns are the row's own, with no expression to set up on each
-- execution: the client compares the fingerprint, and the limit is a
-- condition of the row rather than a CASE in the columns.
{{define "claim_peek"}}SELECT r.status, r.token, r.attempt, r.fingerprint, r.lease_until, r.result, r.expires_at
FROM {{.table}} AS r WHERE r.key = $1::bytea AND NOT {{template "takeover" args . "fp" "$2::bytea"}}
	AND coalesce(octet_length(r.result), 0) <= {{.limit}}{{end}}

-- TxGuard's claim, whose result is not capped. A claim that returns no
-- row restores no lock_timeout: the one that runs next still waits as the
-- guard's.
{{define "tx_claim_read"}}{{template "read_first_claim" args . "result" "r.result AS result" "result_cols" "result" "null_result" "NULL::bytea" "restore" "yes"}}{{end}}

-- The ON CONFLICT branch of the full claims, which answer every outcome
-- in one statement whatever a concurrent claim did since a snapshot: for
-- the keys claim_batch did not answer from its read, and for Store.Claim
-- and TxGuard when their read_first_claim found no row, again and again,
-- under claims racing on the key. A full claim that finds a record always
-- rewrites it, so that RETURNING yields the row as it is under the row
-- lock, whatever happened. Each column is rewritten with its own value
-- unless the branch changes it:
--
--   new   the record expired: replaced as if absent (attempt 1)
--   keep  fingerprint differs (ErrKeyReused, checked first in every
--         status), an outcome (Duplicate), or a live lease (Busy)
--   cap   lease over, attempts exhausted: Failed(ErrTooManyAttempts)
--   take  lease over or released: a new token, attempt+1
--
-- The unchanged rewrite of "keep" touches no indexed column, so it is a
-- HOT update: no index entry, the result's TOAST shared. OFFSET 0 keeps the
-- branch a subquery computed once, instead of inlined into each of the
-- eight CASEs (which made every execution's setup several times heavier).
-- Arguments: max_attempts, the claim's cap (NULL for none); cause, the
-- cause stored when capped.
{{define "on_conflict_claim"}}ON CONFLICT (key) DO UPDATE SET
	(status, token, attempt, fingerprint, lease_until, retention, result, expires_at) = (
	SELECT
		CASE b.branch WHEN 'keep' THEN r.status WHEN 'cap' THEN 3 ELSE 1 END,
		CASE b.branch WHEN 'keep' THEN r.token WHEN 'cap' THEN 0 ELSE excluded.token END,
		CASE b.branch WHEN 'new' THEN 1 WHEN 'take' THEN r.attempt + 1 ELSE r.attempt END,
		CASE b.branch WHEN 'new' THEN excluded.fingerprint ELSE r.fingerprint END,
		CASE b.branch WHEN 'keep' THEN r.lease_until WHEN 'cap' THEN NULL ELSE excluded.lease_until END,
		CASE b.branch WHEN 'keep' THEN r.retention ELSE excluded.retention END,
		CASE b.branch WHEN 'keep' THEN r.result WHEN 'cap' THEN {{.cause}} ELSE NULL END,
		CASE b.branch WHEN 'keep' THEN r.expires_at
			WHEN 'cap' THEN statement_timestamp() + excluded.retention
			ELSE excluded.expires_at END
	FROM (SELECT CASE
		WHEN r.expires_at <= statement_timestamp() THEN 'new'
		WHEN r.fingerprint <> excluded.fingerprint OR r.status <> 1 THEN 'keep'
		WHEN r.token <> 0 AND r.lease_until > statement_timestamp() THEN 'keep'
		WHEN r.attempt >= {{.max_attempts}} THEN 'cap'
		ELSE 'take' END AS branch OFFSET 0) b){{end}}

-- The full claim, arguments as read_first_claim's: $1 key, $2
-- fingerprint, $3 lease, $4 retention, $5 max attempts (0: no cap), $6 the
-- cause stored when capped. It always returns the row. The new token is
-- drawn once, for the proposed row; currval reads it back, so the last
-- column says the row holds this statement's token. Argument: limit, the
-- parameter of the longest result returned (see capped_result), or empty
-- for the result as it is.
{{define "full_claim"}}{{template "insert_claim" .}}
{{template "on_conflict_claim" args . "max_attempts" "NULLIF($5::int, 0)" "cause" "$6::bytea"}}
RETURNING r.status, r.token, r.attempt, r.fingerprint = $2::bytea, r.lease_until,
	{{if .limit}}{{template "capped_result" .}}{{else}}r.result{{end}}, r.expires_at, r.token = currval('{{.seq}}'){{end}}

-- A Store's columns for the result of the record r: the result, NULL when
-- it is longer than the argument limit (a parameter), and its length. The
-- server never sends a result the Store refuses to read.
{{define "capped_result"}}CASE WHEN octet_length(r.result) <= {{.limit}} THEN r.result END, octet_length(r.result){{end}}

-- Store.Claim's full claim: $7 the longest result returned.
{{define "claim"}}{{template "full_claim" args . "limit" "$7::int"}}{{end}}

-- TxGuard's full claim, whose result is not capped.
{{define "tx_claim"}}{{template "full_claim" args . "limit" ""}},
	{{template "restore_lock_timeout"}}{{end}}

-- Arrays of one round of ClaimBatch, keys distinct and sorted, with the
-- tokens the client drew for them: $1 keys, $2 fingerprints, $3 leases, $4
-- retentions, $5 tokens, $6 max attempts (0: no cap), $7 the cause stored
-- when capped; $8 the longest result returned. It reads first, as
-- read_first_claim: cur holds the rows of the snapshot that are not to be
-- taken over (outcomes, live leases, other fingerprints), answered as they
-- are, written and locked by nothing. The other keys, absent from the
-- snapshot or to be taken over, go to the full claim's INSERT … ON
-- CONFLICT DO UPDATE, which always returns their row, whatever a
-- concurrent claim did since the snapshot (it locks and rewrites the row
-- then). They are inserted (and locked) in the arrays' order, which is key
-- order (ORDER BY the ordinality: a join may reorder), so two batches lock
-- the rows they share in the same order and never deadlock. Every entry
-- comes back once, in no particular order; the client places the rows by
-- their keys and tells the keys it acquired by their tokens.
{{define "claim_batch"}}WITH cur AS MATERIALIZED (
	SELECT r.key, r.status, r.token, r.attempt, r.fingerprint, r.lease_until,
		{{template "capped_result" args . "limit" "$8::int"}}, r.expires_at
	FROM unnest($1::bytea[], $2::bytea[]) AS a(key, fingerprint)
	JOIN {{.table}} AS r ON r.key = a.key
	WHERE NOT coalesce({{template "takeover" args . "fp" "a.fingerprint"}}, false)),
ins AS (
	INSERT INTO {{.table}} AS r
		(key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
	SELECT a.key, 1, a.token, 1, a.fingerprint, statement_timestamp() + a.lease, a.retention, NULL,
		statement_timestamp() + a.lease + a.retention
	FROM unnest($1::bytea[], $2::bytea[], $3::interval[], $4::interval[], $5::bigint[]) WITH ORDINALITY
		AS a(key, fingerprint, lease, retention, token, i)
	WHERE NOT EXISTS (SELECT FROM cur WHERE cur.key = a.key)
	ORDER BY a.i
	{{template "on_conflict_claim" args . "cause" "$7::bytea"
		"max_attempts" "(SELECT NULLIF(c.max_attempts, 0) FROM unnest($1::bytea[], $6::int[]) AS c(key, max_attempts) WHERE c.key = excluded.key)"}}
	RETURNING r.key, r.status, r.token, r.attempt, r.fingerprint, r.lease_until,
		{{template "capped_result" args . "limit" "$8::int"}}, r.expires_at)
SELECT * FROM ins UNION ALL SELECT * FROM cur{{end}}

-- ---------------------------------------------------------------------------
-- A holder's calls
-- ---------------------------------------------------------------------------

-- The fencing condition of every holder's call: the claim's token ($2) is
-- current (never 0: the caller checks), the record ($1) in progress and not
-- expired. A lease that ran out does not matter: the token stays current
-- until someone takes over.
{{define "holder"}}key = $1::bytea AND token = $2::bigint AND status = 1 AND expires_at > statement_timestamp(){{end}}

-- The expires_at an outcome of the argument retention writes: the
-- retention from now, or the row's expires_at as it is when that is no
-- earlier and no later than the lease end plus the retention. A claim sets
-- expires_at to its lease end plus its retention, so an outcome stored
-- within the lease with the claim's retention keeps it: the UPDATE then
-- changes no indexed column and can be HOT (heap-only: no new entry in the
-- key or expiry index, much less to write). The record is then kept its
-- retention plus at most the rest of the lease.
{{define "kept_expiry"}}CASE WHEN expires_at >= statement_timestamp() + {{.retention}}
		AND expires_at <= lease_until + {{.retention}}
	THEN expires_at ELSE statement_timestamp() + {{.retention}} END{{end}}

-- Complete and Fail: $3 status, $4 result, $5 retention.
{{define "finish"}}UPDATE {{.table}} SET status = $3::smallint, result = $4::bytea, lease_until = NULL,
	expires_at = {{template "kept_expiry" args . "retention" "$5::interval"}}
WHERE {{template "holder"}}{{end}}

-- The lease ends now and no token is current: the next claim takes over at
-- once.
{{define "release"}}UPDATE {{.table}} SET token = 0, lease_until = statement_timestamp()
WHERE {{template "holder"}}{{end}}

-- $3 lease. The record stays at least the claim's retention after the new
-- lease end.
{{define "extend"}}UPDATE {{.table}} SET lease_until = statement_timestamp() + $3::interval,
	expires_at = greatest(expires_at, statement_timestamp() + $3::interval + retention)
WHERE {{template "holder"}}{{end}}

-- $1 keys, $2 tokens, $3 values, $4 retentions. The rows are locked in key
-- order first, by a SELECT … ORDER BY … FOR UPDATE (which locks the rows as
-- the sort hands them out), so two batches that share rows lock them in
-- the same order and never deadlock; the UPDATE's own join may visit the
-- rows in any order the planner likes. Key and token pairs are distinct.
{{define "complete_batch"}}WITH c AS (
	SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bytea[], $4::interval[])
		WITH ORDINALITY AS c(key, token, value, retention, i)),
locked AS MATERIALIZED (
	SELECT r.key FROM {{.table}} AS r JOIN c ON r.key = c.key AND r.token = c.token
	ORDER BY r.key FOR UPDATE OF r)
UPDATE {{.table}} AS r SET status = 2, result = c.value, lease_until = NULL,
	expires_at = {{template "kept_expiry" args . "retention" "c.retention"}}
FROM c
WHERE r.key = c.key AND r.token = c.token AND r.key IN (SELECT key FROM locked)
	AND r.status = 1 AND r.expires_at > statement_timestamp()
RETURNING c.i{{end}}

-- ---------------------------------------------------------------------------
-- Reading and deleting
-- ---------------------------------------------------------------------------

-- $1 key, $2 the longest result returned.
{{define "get"}}SELECT status, token, attempt, fingerprint, lease_until,
	{{template "capped_result" args . "limit" "$2::int"}}, expires_at
FROM {{.table}} AS r WHERE key = $1::bytea AND expires_at > statement_timestamp(){{end}}

{{define "delete"}}DELETE FROM {{.table}} WHERE key = $1::bytea{{end}}

-- $1 key, $2 status, $3 token: the record is deleted only while it is live
-- with the status and token the caller read. A DELETE that waited for the
-- row lock of a concurrent claim or outcome checks its condition again on
-- the row that call left, so a record taken over or finished meanwhile is
-- never deleted. The first column says whether it deleted, the second
-- whether the statement's snapshot holds a live record of the key (a
-- refusal is then a changed record, else a missing one).
{{define "delete_if"}}WITH d AS (
	DELETE FROM {{.table}} WHERE key = $1::bytea AND status = $2::smallint AND token = $3::bigint
		AND expires_at > statement_timestamp()
	RETURNING 1)
SELECT EXISTS (SELECT FROM d),
	EXISTS (SELECT FROM {{.table}} WHERE key = $1::bytea AND expires_at > statement_timestamp()){{end}}

-- Store.Scan's page: the live records whose key follows $1 (from $1 on,
-- when $3 is true), in key order, at most $4 of them; $2 the longest result
-- returned. The primary key's index serves the order and the start.
{{define "scan"}}SELECT key, status, token, attempt, fingerprint, lease_until,
	{{template "capped_result" args . "limit" "$2::int"}}, expires_at
FROM {{.table}} AS r WHERE (key > $1::bytea OR ($3::bool AND key = $1::bytea)) AND expires_at > statement_timestamp()
ORDER BY key LIMIT $4::int{{end}}

-- $1 the most rows deleted. Rows locked by a claim or a holder's call in
-- flight are skipped: the reaper never waits, and never deletes a record a
-- claim just renewed (the locked row is re-checked against the condition).
{{define "reap"}}DELETE FROM {{.table}} WHERE key IN (
	SELECT key FROM {{.table}} WHERE expires_at <= statement_timestamp()
	ORDER BY expires_at LIMIT $1::int FOR UPDATE SKIP LOCKED)
AND expires_at <= statement_timestamp(){{end}}

-- ---------------------------------------------------------------------------
-- TxGuard
-- ---------------------------------------------------------------------------

-- Its outcomes, $1 key, $2 token, $3 value or cause, $4 retention: the
-- fenced UPDATE, which raises an error when it matches no row (a cast of
-- the text no_outcome_row, which TxGuard recognises), so that the
-- transaction aborts and the COMMIT pipelined after it rolls back: fn's
-- writes never commit without their outcome. count(*) is not a constant,
-- so the cast is not folded at planning: it fails only when it runs, on no
-- row. The row has been locked by this transaction since its claim, so
-- whether it expired since does not matter. Arguments: status, and
-- expires_at.
{{define "tx_outcome"}}WITH u AS (
	UPDATE {{.table}} SET status = {{.status}}, result = $3::bytea, lease_until = NULL, expires_at = {{.expires_at}}
	WHERE key = $1::bytea AND token = $2::bigint AND status = 1
	RETURNING 1)
SELECT CASE count(*) WHEN 1 THEN 1 ELSE ('{{.no_outcome_row}} ' || count(*))::int END FROM u{{end}}

-- A complete keeps expires_at when it is late enough already (see
-- txguard.ClaimLease: a completed record is kept at least its retention
-- after the commit, and at most the claim's lease longer).
{{define "tx_complete"}}{{template "tx_outcome" args . "status" "2"
	"expires_at" "greatest(expires_at, statement_timestamp() + $4::interval)"}}{{end}}

{{define "tx_fail"}}{{template "tx_outcome" args . "status" "3" "expires_at" "statement_timestamp() + $4::interval"}}{{end}}

-- The claim waits at most TxConfig.LockTimeout (the argument
-- lock_timeout_ms, an integer literal): this statement, before the claim,
-- saves the transaction's lock_timeout in a placeholder setting and sets
-- the guard's; the claim's RETURNING list, computed once the claim has its
-- row (and so after any wait), restores the saved value
-- (restore_lock_timeout), so fn's statements wait as the caller
-- configured. The subquery (kept by OFFSET 0 and its volatile function)
-- runs first: the saved value is the transaction's.
{{define "set_lock_timeout"}}SELECT set_config('lock_timeout', '{{.lock_timeout_ms}}', true)
FROM (SELECT set_config('pgstore.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) saved{{end}}

{{define "restore_lock_timeout"}}set_config('lock_timeout', current_setting('pgstore.lock_timeout'), true){{end}}

-- BEGIN with set_lock_timeout, one message (simple protocol), for a
-- Beginner that is neither a pool nor a connection.
{{define "begin"}}BEGIN ISOLATION LEVEL READ COMMITTED; {{template "set_lock_timeout" .}}{{end}}

-- DoTx's claim runs after the savepoint pgstore_claim, fn after
-- pgstore_fn: a claim that fails, or fn's permanent error, rolls back to
-- them and leaves the caller's transaction usable.
{{define "savepoint_claim"}}SAVEPOINT pgstore_claim{{end}}
{{define "release_claim"}}RELEASE SAVEPOINT pgstore_claim{{end}}
{{define "rollback_claim"}}ROLLBACK TO SAVEPOINT pgstore_claim; RELEASE SAVEPOINT pgstore_claim{{end}}
{{define "savepoint_fn"}}SAVEPOINT pgstore_fn{{end}}

-- DoBatchTx's claims run after the savepoint pgstore_batch: a batch that
-- stops at an operation whose writes are in the transaction, or fails,
-- rolls back to it, and leaves the caller's transaction usable. Its claim
-- (claim_batch) restores the transaction's lock_timeout in a statement of
-- its own, pipelined after it.
{{define "savepoint_batch"}}SAVEPOINT pgstore_batch{{end}}
{{define "release_batch"}}RELEASE SAVEPOINT pgstore_batch{{end}}
{{define "rollback_batch"}}ROLLBACK TO SAVEPOINT pgstore_batch; RELEASE SAVEPOINT pgstore_batch{{end}}
{{define "restore_lock_timeout_stmt"}}SELECT {{template "restore_lock_timeout"}}{{end}}
{{define "rollback_fn"}}ROLLBACK TO SAVEPOINT pgstore_fn{{end}}
{{define "commit"}}COMMIT{{end}}
