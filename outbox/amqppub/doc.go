// Package amqppub publishes an outbox's messages to RabbitMQ (AMQP 0-9-1,
// amqp091-go), for an outbox.Relay.
//
// Each message is published to the exchange of [WithExchange] (the
// default exchange unless set) with its Destination as the routing key,
// mandatory, persistent, with its ID as the message-id property (the
// consumer's idempotency key) and its headers as AMQP headers. The channel
// is in confirm mode: a message counts as published once the broker
// confirmed it; a negative confirm, and a message returned because no
// queue took it, fail it, and the relay publishes it again later.
//
//	pub, _ := amqppub.New("amqp://guest:guest@127.0.0.1:5672/", amqppub.WithExchange("orders"))
//	defer pub.Close()
//	relay, _ := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//
// The Publisher dials its own connection, on the first Publish, and dials
// again on the next Publish once that connection is lost: the relay backs
// off meanwhile. A call never spans two connections, and is sent in rounds
// of one message per key (outbox.PublishInRounds), so a message the broker
// refuses or returns is not overtaken by the next of its key.
package amqppub
