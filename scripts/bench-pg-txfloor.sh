#!/usr/bin/env bash
# How close any TxGuard.Do can come to the bare transaction on this
# server, with no Go client at all: pgbench runs, pipelined as pgstore
# sends them, the statements of
#   bare     BEGIN; the business INSERT; COMMIT (three round trips, as
#            pgx.BeginFunc sends them: the Go benchmark's "bare");
#   txguard  TxGuard.Do's own: [BEGIN, the lock_timeout setting, the
#            claim's INSERT, SAVEPOINT] [the business INSERT] [the
#            outcome's fenced UPDATE, COMMIT];
#   atend    the least a record in the same transaction can cost: an
#            advisory lock and a look-up of the key instead of the claim's
#            row, and one INSERT of the finished record at the end (no
#            lock_timeout, no outcome check). pgstore does not do this (a
#            duplicate would not wait on the record's row, nor would a
#            plain Guard sharing the table): it is a floor.
# Each round runs the three for 8 s each with C clients; the script prints
# the medians of ROUNDS rounds and the median of each round's own ratio
# to bare.
#   scripts/bench-pg-txfloor.sh [rounds] [clients]     (default 3 16)
# PostgreSQL: IDEM_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test?sslmode=disable),
# in an idemfloor_* schema this script drops.
set -euo pipefail
stats=$(cat "$(dirname "$0")/stats.awk")
migration=$(dirname "$0")/../pgstore/migrations/0001_records.sql
rounds=${1:-3}
clients=${2:-16}
url=${IDEM_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
schema="idemfloor_$(date +%s)_$RANDOM"
tmp=$(mktemp -d)
cleanup() {
	psql "$url" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

t=$schema.idem_records
{
	echo "CREATE SCHEMA $schema;"
	sed "s/{table}/$t/g; s/{index}/idem_records_expires_at_idx/g; s/{seq}/$schema.idem_records_token_seq/g" "$migration"
	echo "CREATE TABLE $schema.ledger (id bigserial PRIMARY KEY, key text NOT NULL, amount int NOT NULL);"
} | psql "$url" -v ON_ERROR_STOP=1 -q

fp="'\\x$(printf 'payload' | sha256sum | cut -c1-64)'::bytea"
value="'{\"status\":\"charged\",\"id\":\"ch_3MmlLrLkdIwHu7ix0snN0B15\"}'::bytea"
ledger="INSERT INTO $schema.ledger (key, amount) VALUES (:k::text, 10);"
cat >"$tmp/bare.sql" <<SQL
\set k random(1, 9000000000000000000)
BEGIN;
$ledger
COMMIT;
SQL
cat >"$tmp/txguard.sql" <<SQL
\set k random(1, 9000000000000000000)
\startpipeline
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT set_config('lock_timeout', '5000', true) FROM (SELECT set_config('pgstore.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) saved;
INSERT INTO $t AS r (key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at) VALUES (int8send(:k), 1, nextval('$schema.idem_records_token_seq'), 1, $fp, statement_timestamp() + interval '1 second', interval '24 hours', NULL, statement_timestamp() + interval '1 second' + interval '24 hours') ON CONFLICT (key) DO NOTHING RETURNING r.token, r.lease_until, r.expires_at, set_config('lock_timeout', current_setting('pgstore.lock_timeout'), true);
SAVEPOINT pgstore_fn;
\endpipeline
$ledger
\startpipeline
WITH u AS (UPDATE $t SET status = 2, result = $value, lease_until = NULL, expires_at = greatest(expires_at, statement_timestamp() + interval '24 hours') WHERE key = int8send(:k) AND token = currval('$schema.idem_records_token_seq') AND status = 1 RETURNING 1) SELECT CASE count(*) WHEN 1 THEN 1 ELSE ('no record ' || count(*))::int END FROM u;
COMMIT;
\endpipeline
SQL
cat >"$tmp/atend.sql" <<SQL
\set k random(1, 9000000000000000000)
\startpipeline
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT pg_try_advisory_xact_lock(7, (:k::bigint % 2000000000)::int);
SELECT status, result FROM $t WHERE key = int8send(:k);
SAVEPOINT pgstore_fn;
\endpipeline
$ledger
\startpipeline
INSERT INTO $t (key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at) VALUES (int8send(:k), 2, :k, 1, $fp, NULL, interval '24 hours', $value, statement_timestamp() + interval '24 hours');
COMMIT;
\endpipeline
SQL

for r in $(seq "$rounds"); do
	for s in bare txguard atend; do
		pgbench -n -M prepared -f "$tmp/$s.sql" -c "$clients" -j "$((clients < 2 ? 1 : 2))" -T 8 "$url" >"$tmp/out" 2>&1 || true
		tps=$(awk '/^tps/ { print $3; exit }' "$tmp/out")
		[ -n "$tps" ] || { echo "pgbench failed on $s:" >&2; grep -m3 -i error "$tmp/out" >&2; exit 1; }
		echo "$r $s $tps" | tee -a "$tmp/runs" >&2
	done
done
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  server: $(psql "$url" -Atc 'SHOW server_version')  synchronous_commit=$(psql "$url" -Atc 'SHOW synchronous_commit')  clients: $clients  rounds: $rounds"
awk "$stats"'
{ add($2, $3) }
function line(s) {
	printf "  %-8s %9.0f tx/s", s, median(s)
	if (s != "bare") printf "   %4.0f%% of bare", 100 * pratio(s, "bare")
	printf "\n"
}
END { line("bare"); line("txguard"); line("atend") }' "$tmp/runs"
