# Sourced by the scripts that count what Redis does rather than time it
# (bench-redis-instructions.sh, bench-redis-batch.sh): a private
# redis-server under callgrind, and the instructions it runs while a
# command does. Needs valgrind and redis-server.

# callgrind_redis_start PORT DIR: starts the server on 127.0.0.1:PORT, its
# profiles in DIR, waits for it to answer, and sets callgrind_pid (the
# caller's EXIT trap kills it).
callgrind_redis_start() {
	valgrind --tool=callgrind --callgrind-out-file="$2/cg.%p" \
		redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no >"$2/valgrind.log" 2>&1 &
	callgrind_pid=$!
	for _ in $(seq 100); do
		redis-cli -p "$1" ping >/dev/null 2>&1 && break
		sleep 0.2
	done
	redis-cli -p "$1" ping >/dev/null
}

# callgrind_redis_count DIR COMMAND…: prints the instructions the server
# ran while COMMAND ran (its output in DIR/bench.out, shown if it fails).
callgrind_redis_count() {
	local dir=$1
	shift
	callgrind_control -z "$callgrind_pid" >/dev/null 2>&1
	"$@" >"$dir/bench.out" 2>&1 || { cat "$dir/bench.out" >&2; return 1; }
	rm -f "$dir"/cg."$callgrind_pid".*
	callgrind_control -d "$callgrind_pid" >/dev/null 2>&1
	awk '/^(summary|totals):/ { print $2; exit }' "$dir"/cg."$callgrind_pid".*
}
