// Package otelrelay reports what an outbox [outbox.Relay] does as
// OpenTelemetry metrics: the messages it published, those the broker
// refused and those it gave up on, and the outbox's backlog. It is a
// module of its own beside idemotel, so that idemotel stays free of the
// outbox's PostgreSQL driver: only a program that runs a relay has both.
//
//	m, err := otelrelay.New(idemotel.Config{}) // the global meter provider
//	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Observer: m.Observe})
//
// # Metrics
//
// Every instrument has the attribute idem.outbox.table: the outbox table,
// as the relay resolved it (outbox.DefaultTable, or schema.table).
//
//	idem.outbox.messages          counter    {message}  messages the relay finished with, by idem.outbox.outcome:
//	                                                    published; refused (the broker said no, the row is
//	                                                    retried after its backoff); unavailable (the broker
//	                                                    could not be reached: no attempt counted); dead (moved
//	                                                    to the dead rows, permanent or out of attempts)
//	idem.outbox.publish.duration  histogram  s          seconds per Publish call (a batch)
//	idem.outbox.pending           gauge      {message}  messages waiting to be published
//	idem.outbox.lag               gauge      s          age of the oldest of them: the relay's lag
//	idem.outbox.dead              gauge      {message}  dead rows, waiting for an operator
//
// The gauges are the relay's last sample of the backlog
// (RelayConfig.LagInterval, 10 s by default): every relay of a table
// samples the whole table, so take their maximum, not their sum.
package otelrelay
