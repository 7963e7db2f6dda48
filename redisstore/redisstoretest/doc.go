// Package redisstoretest gives each test a Redis key prefix of its own, so
// that tests of code built on [redisstore] run in parallel, and beside
// other test runs on the same server, without seeing one another's
// records:
//
//	func TestCharge(t *testing.T) {
//		t.Parallel()
//		store := redisstoretest.Store(t, redisstoretest.Client(t), redisstore.Config{})
//		// … idem.New(store, …)
//	}
//
// The server is the one IDEM_REDIS_ADDR names (default 127.0.0.1:6379).
// When [Client] cannot reach it, the test skips with a message naming the
// variable, or fails under IDEM_REQUIRE_SERVICES=1, as make test and CI set
// it.
//
// [Prefix] names each prefix idemtest:<random>: and deletes the keys under
// it when the test ends, on every primary of a cluster.
//
// [FencedDedupe] is a benchmark's limit, not a store: the least a dedupe
// that fences its outcome writes sends Redis per batch, for benchmarks to
// set a store beside.
package redisstoretest
