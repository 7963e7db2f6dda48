#!/usr/bin/env bash
# Guard.Do of a completed key before and after a change, in one run:
# `idem-bench store` is built at BASE, with this tree's
# bench harness (cmd/idem-bench, and storeurl, which it opens stores with)
# so that both sides measure the same way, and at this tree; BASE must
# have the store contract in package storage (8b5e409 or later); the two then run in turn, RUNS times each (which
# goes first alternates), one round of the duplicate cases each time. The
# table gives the medians of the runs' keys/s and allocations per Do, and
# the median of the runs' own new ÷ old ratios: the two ran seconds apart,
# so drift in the machine's speed weighs on both alike.
#   scripts/bench-replay.sh [BASE]      (default: where this branch left main)
#   IDEM_REPLAY_RUNS (default 9), IDEM_REPLAY_DURATION (default 1s),
#   IDEM_REPLAY_GOROUTINES (default 1,16), IDEM_REPLAY_STORE (default mem://),
#   IDEM_REPLAY_CASES (default do-duplicate,do-cached; do-cached is mem:// only)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-$(git merge-base main HEAD)}
runs=${IDEM_REPLAY_RUNS:-9}
duration=${IDEM_REPLAY_DURATION:-1s}
goroutines=${IDEM_REPLAY_GOROUTINES:-1,16}
store=${IDEM_REPLAY_STORE:-mem://}
cases=${IDEM_REPLAY_CASES:-do-duplicate,do-cached}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

mkdir "$dir/old"
git archive "$base" | tar -x -C "$dir/old"
for m in cmd/idem-bench storeurl; do
	rm -rf "${dir:?}/old/$m"
	cp -r "$m" "$dir/old/$m"
	find "$dir/old/$m" -name '*_test.go' -delete
done
(cd "$dir/old" && go work use ./cmd/idem-bench ./storeurl &&
	go work edit -replace=github.com/idemgo/idem/cmd/idem-bench@v0.1.0=./cmd/idem-bench \
		-replace=github.com/idemgo/idem/storeurl@v0.1.0=./storeurl &&
	go build -o "$dir/idem-old" ./cmd/idem-bench)
go build -o "$dir/idem-new" ./cmd/idem-bench
echo "base $base ($(git rev-parse --short "$base")) against $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo '+changes')"
echo "store $store, $runs runs of each, one round of $duration per side, goroutines $goroutines, started $(date -u +%FT%TZ)"

run() { # run SIDE: one round of each case, as lines "side case goroutines store_kps store_allocs bare_kps"
	"$dir/idem-$1" store --store "$store" --cases "$cases" --goroutines "$goroutines" \
		--rounds 1 --duration "$duration" --json 2>/dev/null |
		sed -n '/^{/,$p' |
		jq -r --arg side "$1" '.rows[] | [$side, .case, .goroutines, .store_keys_per_s[0], .store_allocs_per_op[0], .bare_keys_per_s[0]] | @tsv'
}
for i in $(seq "$runs"); do
	if ((i % 2)); then run old; run new; else run new; run old; fi
done >"$dir/runs.tsv"

awk -F'\t' "$(cat scripts/stats.awk)"'
{ k = $2 "\t" $3; if (!(k in seen)) { seen[k] = 1; order[++rows] = k }
  add($1 " kps " k, $4); add($1 " allocs " k, $5); add("bare " k, $6) }
END {
	printf "%-14s %10s %14s %10s %14s %10s %9s %14s %9s  %s\n", "case", "goroutines", "old keys/s", "old allocs", "new keys/s", "new allocs", "new÷old", "bare keys/s", "new÷bare", "each run'"'"'s new÷old"
	for (r = 1; r <= rows; r++) {
		k = order[r]; split(k, f, "\t")
		ratio = pratio("new kps " k, "old kps " k)
		each = ""
		for (i = 1; i <= n["ratio new kps " k]; i++) each = each sprintf(" %.2f", v["ratio new kps " k, i])
		printf "%-14s %10d %14.0f %10.1f %14.0f %10.1f %8.2f× %14.0f %8.0f%% %s\n", f[1], f[2],
			median("old kps " k), median("old allocs " k), median("new kps " k), median("new allocs " k),
			ratio, median("bare " k), 100 * median("new kps " k) / median("bare " k), each
	}
}' "$dir/runs.tsv"
