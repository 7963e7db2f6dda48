// Package natsstores runs the tests and benchmarks of package idemnats
// that need a real store, Redis or PostgreSQL: a key's one effect over
// every store, a consumer process killed mid-handler with its keys in a
// store another process shares, and the consumer's throughput over each
// store. They run from the integration module, so the idemnats module's
// go.mod stays free of the stores' dependencies. It holds tests only.
package natsstores
