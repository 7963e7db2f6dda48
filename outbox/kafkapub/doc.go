// Package kafkapub publishes an outbox's messages to Kafka with franz-go's
// idempotent producer, for an outbox.Relay.
//
// Each message becomes a record of the topic named by its Destination,
// with the message's Key as the record key (the client's partitioner, by
// default murmur2 like Java's, sends a key to one partition), its headers
// as record headers, and its ID in the "idempotency-key" header
// ([WithIDHeader]): the consumer's idempotency key.
//
//	client, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
//	pub, _ := kafkapub.New(client)
//	relay, _ := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//
// A message to a topic the broker can never take fails alone, as
// permanent: the relay moves it to the dead rows after one try. [CheckTopic]
// given to outbox.Config.CheckDestination refuses it at Enqueue instead.
//
// # Order and duplicates
//
// The idempotent producer keeps each partition's records in order through
// retries and never fails a record while producing a later one of its
// partition (franz-go's gapless ordering), so a call is produced all at
// once, pipelined, and a key's messages stay in order. Its sequence numbers
// also make the broker drop a record the client retried; a message the
// relay publishes again after a crash is a new record, which the consumer
// drops by its idempotency key.
//
// While the cluster cannot be reached the client retries the records it
// sent; a call returns when every record is answered or its context ends
// (the relay's PublishTimeout), and the relay backs off. See
// [Publisher.Publish] for what happens to the records left in flight.
package kafkapub
