// Package pgstoretest gives each test a PostgreSQL schema of its own, in
// the style of River's riverdbtest, so that tests of code built on
// [pgstore] run in parallel, and beside other test runs on the same
// server, without seeing one another's records:
//
//	func TestCharge(t *testing.T) {
//		t.Parallel()
//		pool := pgstoretest.Pool(t, 4)
//		store := pgstoretest.Store(t, pool, pgstore.Config{})
//		// … idem.New(store, …), or pgstore.NewTxGuard(pool, …) on store's table
//	}
//
// The server is the one IDEM_POSTGRES_URL names (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable). When [Pool]
// cannot reach it, the test skips with a message naming the variable, or
// fails under IDEM_REQUIRE_SERVICES=1, as make test and CI set it.
//
// [Schema] names each schema idemtest_<unix seconds>_<random> and drops it,
// with everything in it, when the test ends. A run that was killed leaves
// its schemas behind; the first Schema call of each test process drops the
// ones more than an hour old.
package pgstoretest
