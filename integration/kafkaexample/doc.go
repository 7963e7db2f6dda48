// Package kafkaexample runs package idemkafka's example of a payments
// consumer that charges once per order over an in-process kfake cluster,
// from the integration module, so the idemkafka module's go.mod stays free
// of kfake, a test double no user needs. It holds tests only.
package kafkaexample
