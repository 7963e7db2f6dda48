// Package amqpstores runs package idemamqp's behaviour suite
// (idemamqp/idemamqptest) over the real stores, Redis and PostgreSQL, and
// the tests and benchmarks of the consumer that need a store shared by
// several processes, from the integration module, so the idemamqp
// module's go.mod stays free of the stores' dependencies. It holds tests
// only.
package amqpstores
