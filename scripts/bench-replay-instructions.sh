#!/usr/bin/env bash
# What a Guard.Do on memstore costs in instructions, before and after a
# change, counted rather than timed: the root package's BenchmarkDo cases
# (this tree's bench_test.go, so both sides run the same loop) are built
# at BASE and at this tree and run under callgrind, on one core, for N1
# and then N2 operations; the difference over N2 - N1 is the cost of one
# Do, the garbage collector's share included, whatever the test binary's
# own start costs. Instructions do not move with a shared machine's load
# the way ns/op do.
#   scripts/bench-replay-instructions.sh [BASE]   (default: where this branch left main)
#   IDEM_CALLGRIND_OPS="N1 N2" (default "20000 60000"),
#   IDEM_CALLGRIND_CASES (default "duplicate duplicate-cached new-key")
# Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-$(git merge-base main HEAD)}
read -r n1 n2 <<<"${IDEM_CALLGRIND_OPS:-20000 60000}"
cases=${IDEM_CALLGRIND_CASES:-duplicate duplicate-cached new-key}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

mkdir "$dir/old"
git archive "$base" | tar -x -C "$dir/old"
cp bench_test.go "$dir/old/bench_test.go"
(cd "$dir/old" && go test -c -o "$dir/old.test" .)
go test -c -o "$dir/new.test" .
echo "base $base ($(git rev-parse --short "$base")) against $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo '+changes'), started $(date -u +%FT%TZ)"

count() { # count SIDE CASE OPS: the instructions of the test binary running OPS operations
	GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
		"$dir/$1.test" -test.run '^$' -test.bench "^BenchmarkDo/$2\$" -test.benchtime "${3}x" -test.cpu 1 2>&1 |
		awk '/Collected/ { print $4 }'
}
declare -A per
printf '%-18s %16s %16s %8s\n' case "old instr/Do" "new instr/Do" "new÷old"
for c in $cases; do
	for side in old new; do
		a=$(count "$side" "$c" "$n1")
		b=$(count "$side" "$c" "$n2")
		per[$side]=$(((b - a) / (n2 - n1)))
	done
	awk -v c="$c" -v o="${per[old]}" -v n="${per[new]}" 'BEGIN { printf "%-18s %16d %16d %8.2f\n", c, o, n, n / o }'
done
