// Package natspub publishes an outbox's messages to NATS JetStream, for an
// outbox.Relay.
//
// Each message goes to the subject named by its Destination, with its
// headers, and with its ID as the Nats-Msg-Id header: a stream with a
// duplicate window (2 minutes by default) drops a message the relay
// publishes again after a crash, and a consumer guarded by idem takes the
// same header as its idempotency key beyond that window.
//
//	nc, _ := nats.Connect(url, nats.ReconnectBufSize(-1))
//	js, _ := jetstream.New(nc)
//	pub, _ := natspub.New(js)
//	relay, _ := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//
// A message to a subject the broker can never take fails alone, as
// permanent: the relay moves it to the dead rows after one try. [CheckSubject]
// given to outbox.Config.CheckDestination refuses it at Enqueue instead.
//
// # Order
//
// A call's messages are published asynchronously, in rounds of one message
// per key (outbox.PublishInRounds): a key's next message is sent once the
// stream acknowledged its previous one, so that a message JetStream
// refuses (no stream ready after a server restart, say) cannot be
// overtaken by the next one of its key. Messages of different keys share a
// round and its single wait.
//
// A call also never spans two connections: a message sent on a connection
// that was then lost may never have reached the server, and a later one
// must not go out on the next connection ahead of it. So the connection
// must not buffer publishes while it reconnects (nats.ReconnectBufSize(-1),
// which New requires), and a call gives up its remaining messages once the
// connection has reconnected since the call began.
package natspub
