// Command brokerdemo is idem's payment demo through a real broker: the
// stream of idem demo, with its duplicate deliveries and consumer crashes,
// sent through a naive consumer and an idem-guarded one by way of Kafka
// consumer groups (idemkafka), NATS JetStream (idemnats) or RabbitMQ
// (idemamqp). It lives in the examples module, beside those clients, so
// that the idem command links none of them.
//
//	cd examples && go run ./brokerdemo --broker kafka --brokers 127.0.0.1:9092
//	cd examples && go run ./brokerdemo --broker nats://127.0.0.1:4222
//	cd examples && go run ./brokerdemo --broker amqp://guest:guest@127.0.0.1:5672/
//
// --broker kafka runs on the Kafka brokers that --brokers host:port,...
// names: the demo creates topics of its own there (unique names, 8
// partitions) and deletes them at the end; for a consumer on an in-process
// Kafka cluster, run go run ./payments. Through NATS, the run has a stream
// of its own on the server, whose AckWait is the visibility timeout; through
// RabbitMQ, a queue of its own, which requeues a crashed consumer's
// deliveries at once. The other flags are idem demo's (--messages,
// --dup-rate, --crash-rate, --seed, --store, ...); -h lists them.
package main
