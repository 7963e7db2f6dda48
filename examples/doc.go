// Package examples is the module of idem's runnable examples: each
// directory below is a small program that uses idem the way a service
// would, against the real stores. Package orders is an HTTP API made
// idempotent with idemhttp; package payments is a consumer made
// effectively-once with idemkafka (Kafka) or idemnats (NATS JetStream).
// Command brokerdemo is the idem command's demo through a real broker,
// whose clients that command does not link.
//
//	cd examples && go run ./orders -store redis://127.0.0.1:6379/0
//	cd examples && go run ./payments
//	cd examples && go run ./brokerdemo --broker nats://127.0.0.1:4222
package examples
