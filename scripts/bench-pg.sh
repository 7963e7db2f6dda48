#!/usr/bin/env bash
# pgstore beside its ceilings, in one run against the same PostgreSQL:
#   - the Go benchmarks of pgstore (bench_test.go): Claim+Complete, a 100-key
#     ClaimBatch and TxGuard.Do, each beside bare pgx doing the least the
#     same work needs (INSERT … ON CONFLICT DO NOTHING + UPDATE; one INSERT
#     from unnest arrays; BEGIN, the business INSERT, COMMIT);
#   - pgbench running those bare statements (-M prepared, -c 1/16/64, -T 10),
#     the server's limit for them without any Go client.
# It prints medians of COUNT Go runs (default 3), the ratios, and the
# server's synchronous_commit (which decides whether a commit waits for
# the disk).
#   scripts/bench-pg.sh [count]
# PostgreSQL: IDEM_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test?sslmode=disable).
# The Go benchmarks work in idemtest_* schemas they drop; pgbench in an
# idembench_* schema this script drops.
set -euo pipefail
stats=$(cat "$(dirname "$0")/stats.awk") # median, pratio: see the file
cd "$(dirname "$0")/../pgstore"
count=${1:-3}
url=${IDEM_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
export IDEM_POSTGRES_URL=$url

schema="idembench_$(date +%s)_$RANDOM"
tmp=$(mktemp -d)
cleanup() {
	psql "$url" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "== go test -bench (count $count)" >&2
# One run after the other rather than -count: every run puts store and bare
# side by side within seconds, so load that comes and goes on the machine
# weighs on both sides of a ratio alike.
go test -c -o "$tmp/pgstore.test" .
for i in $(seq "$count"); do
	"$tmp/pgstore.test" -test.run '^$' -test.bench '^(BenchmarkClaimComplete|BenchmarkClaimBatch|BenchmarkTxDo)$' \
		-test.benchtime 2s -test.timeout 60m | tee -a "$tmp/go" >&2
done

echo "== pgbench" >&2
# The bare table has the records table's shape (pgstore's migration), the
# ledger the business table of BenchmarkTxDo.
psql "$url" -v ON_ERROR_STOP=1 -q <<SQL
CREATE SCHEMA $schema;
CREATE TABLE $schema.bare (
	key bytea PRIMARY KEY, status smallint NOT NULL CHECK (status IN (1, 2, 3)), token bigint NOT NULL,
	attempt integer NOT NULL CHECK (attempt > 0), fingerprint bytea NOT NULL, lease_until timestamptz,
	retention interval NOT NULL, result bytea, expires_at timestamptz NOT NULL) WITH (fillfactor = 90);
CREATE INDEX ON $schema.bare (expires_at);
CREATE TABLE $schema.ledger (id bigserial PRIMARY KEY, key text NOT NULL, amount int NOT NULL);
SQL
fp="'\\x$(printf 'payload' | sha256sum | cut -c1-64)'"
value="'{\"status\":\"charged\",\"id\":\"ch_3MmlLrLkdIwHu7ix0snN0B15\"}'::bytea"
cat >"$tmp/claim_complete.sql" <<SQL
\set k random(1, 9000000000000000000)
INSERT INTO $schema.bare (key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at) VALUES (int8send(:k), 1, :k, 1, $fp, now() + interval '30 seconds', interval '24 hours', NULL, now() + interval '24 hours 30 seconds') ON CONFLICT (key) DO NOTHING;
UPDATE $schema.bare SET status = 2, result = $value, lease_until = NULL, expires_at = now() + interval '24 hours' WHERE key = int8send(:k) AND token = :k;
SQL
cat >"$tmp/batch100.sql" <<SQL
\set k random(1, 90000000000000000)
INSERT INTO $schema.bare (key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at) SELECT int8send(:k::bigint * 100 + g), 1, :k::bigint * 100 + g, 1, $fp, now() + interval '30 seconds', interval '24 hours', NULL, now() + interval '24 hours 30 seconds' FROM generate_series(0, 99) AS g ON CONFLICT (key) DO NOTHING;
SQL
cat >"$tmp/tx.sql" <<SQL
\set k random(1, 9000000000000000000)
BEGIN;
INSERT INTO $schema.ledger (key, amount) VALUES (:k::text, 10);
COMMIT;
SQL
pgb() { # pgb NAME SCRIPT CLIENTS: appends "NAME tps" to $tmp/pgbench
	local tps
	tps=$(pgbench -n -M prepared -f "$tmp/$2" -c "$3" -j "$(($3 < 2 ? 1 : 2))" -T 10 "$url" 2>&1 |
		awk '/^tps/ { print $3; exit }')
	echo "$1/c=$3 $tps" | tee -a "$tmp/pgbench" >&2
}
for c in 1 16 64; do pgb claim_complete claim_complete.sql "$c"; done
for c in 1 16; do pgb batch100 batch100.sql "$c"; done
for c in 1 16; do pgb tx tx.sql "$c"; done

echo
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)  cores: $(nproc)  $(go version | cut -d' ' -f3)"
echo "server: $(psql "$url" -Atc 'SHOW server_version')  synchronous_commit=$(psql "$url" -Atc 'SHOW synchronous_commit')  fsync=$(psql "$url" -Atc 'SHOW fsync')"
echo "medians of $count Go runs; keys/s (ops/s for Do) per second of wall time; ratio: the median of the runs' own store/bare ratios; pgbench: one run of 10 s"
echo
awk "$stats"'
FNR == NR && /^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 4; i < NF; i++) if ($(i + 1) == "keys/s" || $(i + 1) == "ops/s") add(name, $i)
	next
}
FNR != NR { add("pgbench/" $1, $2) }
function row(title, bench, g, pgbench, mult,   s, b) {
	s = median(bench "/store/g=" g); b = median(bench "/bare/g=" g)
	printf "%-32s %12.0f %12.0f %7.0f%% %12.0f\n", title, s, b, 100 * pratio(bench "/store/g=" g, bench "/bare/g=" g), mult * median("pgbench/" pgbench "/c=" g)
}
END {
	printf "%-32s %12s %12s %8s %12s\n", "Claim+Complete, goroutines", "store keys/s", "bare keys/s", "ratio", "pgbench"
	row("1", "BenchmarkClaimComplete", 1, "claim_complete", 1)
	row("16", "BenchmarkClaimComplete", 16, "claim_complete", 1)
	row("64", "BenchmarkClaimComplete", 64, "claim_complete", 1)
	printf "\n%-32s %12s %12s %8s %12s\n", "ClaimBatch of 100, goroutines", "store keys/s", "bare keys/s", "ratio", "pgbench"
	row("1", "BenchmarkClaimBatch", 1, "batch100", 100)
	row("16", "BenchmarkClaimBatch", 16, "batch100", 100)
	printf "\n%-32s %12s %12s %8s %12s\n", "TxGuard.Do, goroutines", "store ops/s", "bare tx/s", "ratio", "pgbench"
	row("1", "BenchmarkTxDo", 1, "tx", 1)
	row("16", "BenchmarkTxDo", 16, "tx", 1)
}' "$tmp/go" "$tmp/pgbench"
