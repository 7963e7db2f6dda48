// Package testenv is the part of idem's test helpers that needs nothing but
// the standard library: where each server the integration tests use is,
// read from the environment, and what a test does when it cannot reach one;
// and what every consumer's tests record and wait on: a [Ledger] of effects
// per key, the [Events] an observer saw, [WaitFor] a condition.
//
// The rule: a test that cannot reach its server, or lacks a program it
// needs, skips with a message that names what is missing and the variable
// that would fix it; under IDEM_REQUIRE_SERVICES=1, which make test and CI
// set, it fails instead, so a plain go test works on a machine without
// servers and CI cannot pass by skipping.
//
// The store test packages, [github.com/idemgo/idem/pgstore/pgstoretest] and
// [github.com/idemgo/idem/redisstore/redisstoretest], build on it; an adapter
// module's tests describe their broker with a [Server] of their own:
//
//	var nats = testenv.Server{Name: "NATS", Env: "IDEM_NATS_URL", Default: "nats://127.0.0.1:4222"}
//
//	nc, err := natsgo.Connect(nats.Addr())
//	if err != nil {
//		nats.Unreachable(t, nats.Addr(), err)
//	}
//
// It lives under internal/ so that only idem's own modules import it; it
// imports the standard library only, as the root module must.
package testenv
