#!/usr/bin/env bash
# What pgstore costs the PostgreSQL server, counted rather than timed: a
# private server on a loopback port runs under callgrind, and `idem-bench
# store` drives it (one goroutine), the store and then bare pgx. Each side
# runs twice, for N1 and N2 operations; the difference of the server's
# instructions over N2 - N1 is the cost of one operation, whatever the
# command's set-up costs (connections, its schema and tables). Instructions
# do not move with the load of a shared machine the way ops/s do.
#   scripts/bench-pg-instructions.sh [case ...]
#   (cases of idem-bench store, default: claim-complete claim-batch txguard-do;
#   IDEM_CALLGRIND_OPS="N1 N2", default "100 600")
# Needs valgrind and PostgreSQL's server binaries; the shared server is not
# touched. Run as root, it runs the server as the postgres user.
set -euo pipefail
cd "$(dirname "$0")/.."
benches=${*:-claim-complete claim-batch txguard-do}
read -r n1 n2 <<<"${IDEM_CALLGRIND_OPS:-100 600}"
port=${IDEM_CALLGRIND_PORT:-5499}
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
dir=$(mktemp -d)
as=()
if [ "$(id -u)" = 0 ]; then
	chown postgres "$dir"
	as=(runuser -u postgres --)
fi
pid=
cleanup() {
	[ -n "$pid" ] && "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT

url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
if psql "$url" -qc 'SELECT 1' >/dev/null 2>&1; then
	echo "bench-pg-instructions: a server already listens on port $port (IDEM_CALLGRIND_PORT)" >&2
	exit 1
fi
go build -o "$dir/idem-bench" ./cmd/idem-bench
"${as[@]}" "$bin/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
"${as[@]}" mkdir "$dir/out"
# Autovacuum off: no background work lands in a count.
"${as[@]}" valgrind --tool=callgrind --callgrind-out-file="$dir/out/cg.%p" \
	"$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 \
	-c autovacuum=off -c synchronous_commit=on -c fsync=on >"$dir/server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
	psql "$url" -qc 'SELECT 1' >/dev/null 2>&1 && break
	sleep 0.2
done
psql "$url" -qc 'SELECT 1' >/dev/null

run() { # run CASE SIDE OPS: the server's instructions for the whole command
	local before=$dir/before db="bench_${1//-/_}_$2_$3" f n m t sum=0
	# A database of its own: the catalogs' dead rows of the runs before do
	# not weigh on this one's count.
	psql "$url" -qc "CREATE DATABASE $db" >/dev/null
	ls "$dir/out" | sort >"$before"
	"$dir/idem-bench" store --store "postgres://postgres@127.0.0.1:$port/$db?sslmode=disable" \
		--cases "$1" --sides "$2" --goroutines 1 --rounds 1 --ops "$3" >"$dir/bench.out" 2>&1 ||
		{ cat "$dir/bench.out" >&2; return 1; }
	# Backends dump their counts as they exit, after the client has gone:
	# wait until the new files stop coming and each has its totals line.
	for _ in $(seq 120); do
		sleep 0.5
		n=$(comm -13 "$before" <(ls "$dir/out" | sort) | wc -l)
		m=0
		for f in $(comm -13 "$before" <(ls "$dir/out" | sort)); do
			grep -q '^totals:' "$dir/out/$f" && m=$((m + 1))
		done
		[ "$n" -gt 0 ] && [ "$n" = "$m" ] && break
	done
	for f in $(comm -13 "$before" <(ls "$dir/out" | sort)); do
		t=$(awk '/^totals:/ { print $2; exit }' "$dir/out/$f")
		sum=$((sum + t))
	done
	echo "$sum"
}
per() { # per CASE SIDE: instructions per operation
	local a b
	a=$(run "$1" "$2" "$n1")
	b=$(run "$1" "$2" "$n2")
	echo $(((b - a) / (n2 - n1)))
}
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  $("$bin/postgres" --version)  operations: $n2 - $n1, one goroutine"
echo "PostgreSQL server instructions per operation (claim-batch: per batch of 100):"
for b in $benches; do
	s=$(per "$b" store)
	r=$(per "$b" bare)
	awk -v b="$b" -v s="$s" -v r="$r" 'BEGIN { printf "  %-14s store %9d   bare %9d   store/bare %.2f\n", b, s, r, s / r }'
done
