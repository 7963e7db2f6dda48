// Package idemsqs consumes an Amazon SQS queue through an [idem.Guard]:
// each message's handler runs at most once to completion per idempotency
// key, and a message SQS delivers again (its visibility timeout ended
// before the delete, a standard queue's own duplicate, a FIFO send
// deduplicated only for five minutes) replays the stored outcome and is
// deleted without running.
//
// It is built on the chassis every idem consumer shares (idemkafka,
// idemamqp, idemnats): the same options under the same names, the same
// safe defaults (a scope decision and a poison decision are required,
// attempts are bounded), the same dead-letter attributes, the same
// behaviour suite.
//
// # The visibility timeout and the lease
//
// SQS's visibility timeout is its lease on a message, as the Guard's lease
// is idem's on a key. The consumer holds both together: from the receipt
// to the settlement, it sets each message's visibility again every third
// of the timeout (ChangeMessageVisibilityBatch, ten at a time), as the
// Guard's heartbeat extends the key's lease every third of the lease. So a
// handler that runs longer than the queue's visibility timeout is not
// delivered again while it runs. Should SQS deliver it anyway (the
// consumer cut off from SQS, a lease lost), the store's claim answers that
// delivery: busy while the first one runs, replayed once its outcome is
// stored. No handler runs twice at once for one key.
//
// # Receive, claim, run, complete, delete
//
// A long-polled ReceiveMessage asks for as many messages as handlers are
// free, up to ten; their keys are claimed in one store round trip
// (ClaimBatch); each handler runs on a goroutine of its own (on a FIFO
// queue, one per message group, in order); the values of the handlers
// that returned meanwhile are stored in one round trip (CompleteBatch),
// and their messages deleted in DeleteMessageBatch calls. Each entry of a
// batch call has its own answer: one SQS failed on its side is tried
// again, one it refused is reported ([EventUnsettled]) and its message
// comes back, to be answered by the store.
//
// # Verdicts
//
//	the Guard answered                           the message
//	a value, fresh or replayed                   deleted
//	ErrInProgress (another holder runs it)       visible again after the busy delay
//	a retryable failure, a panic                 visible again after the retry backoff;
//	                                             poison after WithMaxAttempts in a row
//	the store or SQS failed, the consumer stops  visible again (held while the store is down)
//	a permanent failure, a reused key,
//	  a missing or unusable key                  poison
//
// Poison goes where the consumer's poison decision says, one of three:
// [WithDeadLetter] (a queue of the user's, the message deleted once its
// letter is sent), [WithRedrivePolicy] (the queue's own redrive policy:
// the message made visible again until SQS moves it after
// maxReceiveCount receives), or [WithDiscardPoison] (deleted, logged).
//
// A pause shorter than a second (SQS's visibility timeouts are whole
// seconds) is held by the consumer, the message kept invisible, and the
// message then made visible at once: never a loop of receives.
//
// # Example
//
//	cfg, _ := config.LoadDefaultConfig(ctx)
//	c, err := idemsqs.New(guard, sqs.NewFromConfig(cfg), queueURL,
//		func(ctx context.Context, m types.Message) error { return charge(ctx, m) },
//		idemsqs.WithSharedScope(),
//		idemsqs.WithDeadLetter(deadLetterURL))
//	if err != nil {
//		return err
//	}
//	return c.Run(ctx)
package idemsqs
