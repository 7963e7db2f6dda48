// Package otelconsumers holds the tests of idemotel's consumer metrics
// against the real brokers: a consumer's events, through each consumer's
// Event.Activity, become the counters and the lag gauge that idemotel's
// package documentation lists. They live here, not in idemotel, so that
// idemotel's go.mod requires no broker client.
//
// Environment: IDEM_NATS_URL (default nats://127.0.0.1:4222) and
// IDEM_KAFKA_BROKERS (default 127.0.0.1:9092).
package otelconsumers
