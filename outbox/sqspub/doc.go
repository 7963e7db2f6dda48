// Package sqspub is the outbox's publisher to Amazon SQS: each message a
// [outbox.Relay] hands it goes to the queue its Destination names (a
// queue URL) in SendMessageBatch calls, each message with its own outcome.
//
// The message's ID travels where the next hop deduplicates: in the
// idempotency-key message attribute, which idemsqs reads by default, and,
// on a FIFO queue, as the MessageDeduplicationId, so that SQS itself drops
// a copy the relay sends again within five minutes. On a FIFO queue the
// message's Key is its MessageGroupId (its ID for a message without a
// key), so SQS delivers a key's messages in the order the relay published
// them; a standard queue keeps no order, whatever the publisher does.
//
// SQS bodies are text: a payload that is not (invalid UTF-8, characters
// SQS refuses, or empty) is sent in base64, marked by the
// [EncodingAttribute] attribute; [Payload] returns a received message's
// payload either way.
//
//	p, err := sqspub.New(sqs.NewFromConfig(cfg))
//	relay, err := outbox.NewRelay(pool, p, outbox.RelayConfig{})
//	err = outbox.Enqueue(ctx, tx, outbox.Message{
//		Destination: "https://sqs.eu-west-1.amazonaws.com/123456789012/payments.fifo",
//		Key:         "order-42",
//		Payload:     []byte(`{"amount":100}`),
//	})
package sqspub
