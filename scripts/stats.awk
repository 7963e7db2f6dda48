# Statistics for scripts/bench-pg-txfloor.sh, which prepends this file to
# its own awk program (idem bench store computes its own in Go).
# add(key, val) records one run's value under key; median(key) is the
# median of a key's values (0 when it has none); pratio(skey, bkey) is the
# median of the runs' own skey/bkey ratios, the k-th value of one beside
# the k-th of the other: the two ran seconds apart in the same round, so
# drift between rounds cancels out of each ratio.

function add(key, val) { n[key]++; v[key, n[key]] = val }

function median(key,   i, j, k, t, a) {
	k = n[key]
	if (k == 0) return 0
	for (i = 1; i <= k; i++) a[i] = v[key, i]
	for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}

function pratio(skey, bkey,   i, k, key) {
	k = (n[skey] < n[bkey]) ? n[skey] : n[bkey]
	key = "ratio " skey
	delete n[key]
	for (i = 1; i <= k; i++) if (v[bkey, i] > 0) add(key, v[skey, i] / v[bkey, i])
	return median(key)
}
