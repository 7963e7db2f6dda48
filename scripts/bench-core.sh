#!/usr/bin/env bash
# Guard.Do on memstore beside the in-process ceiling, a bare sync.Map, in
# one run: medians of 5 runs each, and the ratios BENCHMARKS.md reports.
#   scripts/bench-core.sh [count]
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-5}
out=$(mktemp)
go test -run '^$' -bench '^(BenchmarkDo|BenchmarkSyncMap)$' -benchmem -count "$count" . | tee "$out" >&2
echo
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)  cores: $(nproc)  $(go version | cut -d' ' -f3)"
awk '
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	n[name]++; ns[name, n[name]] = $3; allocs[name] = $7
}
function median(name,   i, j, k, t, a) {
	k = n[name]
	for (i = 1; i <= k; i++) a[i] = ns[name, i]
	for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}
END {
	printf "%-22s %12s %10s %12s %12s %8s\n", "case", "Do ns/op", "allocs/op", "sync.Map ns", "Do ops/s", "ratio"
	split("new-key duplicate new-key-parallel duplicate-parallel", cases, " ")
	for (c = 1; c <= 4; c++) {
		d = median("BenchmarkDo/" cases[c]); m = median("BenchmarkSyncMap/" cases[c])
		printf "%-22s %12.0f %10d %12.1f %12.0f %7.2fx\n", cases[c], d, allocs["BenchmarkDo/" cases[c]], m, 1e9 / d, d / m
	}
}' "$out"
rm -f "$out"
