// Package chassis is what idem's message consumers (idemkafka and its
// kafkapg, idemnats, idemamqp) are built on, so that each keeps only its
// broker's protocol: how messages are fetched, acknowledged, redelivered
// and published.
//
// It owns, once for the three:
//
//   - the options every consumer has, with one vocabulary ([Options]: the
//     key's source, the scope and poison decisions, the fingerprint, the
//     attempts, the backoff, the busy delay, the drain timeout, the logger)
//     and their checks, a missing scope or poison decision among them;
//   - a message's scope, key and payload ([Options.Read]): read, the key
//     checked by the Guard's rules, and their errors ([consumer.ErrNoKey],
//     [consumer.KeyError], a user function's panic as a
//     [consumer.PanicError] that makes the message poison);
//   - the verdict on a message once the Guard answered ([Options.Decide]):
//     acknowledge it, redeliver it (after the busy delay or a backoff), or
//     dead-letter it, bounded by the consumer's MaxAttempts, with the
//     reason of a dead letter, all in one table;
//   - a handler's run: its panic turned into a [consumer.PanicError], its
//     context carrying the message's trace context ([Options.Call]);
//   - the dead letter itself ([Letter.Fit]): the original with the idem
//     headers, cut to the broker's limit, and its sending
//     ([Options.SendLetter]): stripped when the broker refuses it as too
//     large, tried again after an outage, given up on after MaxAttempts
//     refusals;
//   - the activity an event about one message counts as ([Activity]), for
//     instrumentation, and the observer's call, its panic recovered
//     ([Options.Observe]).
//
// The package imports the standard library, the core and the public
// consumer package only, like internal/adapter.
package chassis
