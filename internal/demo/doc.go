// Package demo is the payment demo that idem's commands run: a stream of
// OrderCreated events with duplicate deliveries and consumer crashes, sent
// through a naive consumer that charges for every delivery and through one
// that charges inside [idem.Guard.Do], and the table of what each charged.
//
// It holds what every way of carrying the stream shares: the stream and
// its crash plan (one seed makes both), the payment ledger, the consumer
// processes that die on the spot and the store connection that dies with
// them, the two handlers, the report, and an in-process at-least-once
// queue. idem demo (cmd/idem) runs it on that queue; the broker demo of
// the examples module (examples/brokerdemo) runs it through Kafka, NATS
// JetStream or RabbitMQ, whose clients the command does not link. It
// imports no broker client either, and nothing outside the standard
// library and idem's core module.
package demo
