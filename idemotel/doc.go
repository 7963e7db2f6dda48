// Package idemotel reports what idem does as OpenTelemetry metrics and
// spans: the claims of a Guard and their outcomes, the store's latency, the
// operations it ran, the leases it lost, the runs it let through without
// idempotency (FailOpen). It is a module of its own, so that the core and
// the adapters stay free of OpenTelemetry; it reads the Guard's
// [idem.Observer] events, which every adapter's Guard reports (idemhttp,
// idemgrpc and the consumers run their operations through one).
//
//	tel, err := idemotel.New(idemotel.Config{}) // the global providers
//	g, err := idem.New(store, idem.Config{Observer: tel.Observe})
//
// # Metrics
//
// Every instrument has the attribute idem.namespace (the Guard's
// Config.Namespace). No attribute holds a key or a scope: they are
// unbounded, and may be personal data.
//
//	idem.claims             counter    claims answered, by idem.outcome: acquired, retried
//	                                   (acquired again after a release, a takeover or a lost
//	                                   lease), replayed (a stored outcome, from the store or the
//	                                   cache), busy, key_reused, too_many_attempts, error
//	idem.store.duration     histogram  seconds per store call, by idem.operation: claim, complete,
//	                                   fail, release, extend; error.type when it failed
//	idem.run.duration       histogram  seconds per operation run, error.type when it failed
//	idem.lease.lost         counter    operations whose lease was lost or not confirmed in time
//	idem.fail_open          counter    operations run without idempotency because the store failed
//	idem.too_large          counter    outcomes too large for the store, kept without them
//
// # Spans
//
// Each step of a Do becomes a span, a child of the span in the caller's
// context (an HTTP server span of otelhttp, a consumer span of kotel):
// "idem claim", "idem run", then "idem complete", "idem fail" or "idem
// release", with the attributes idem.namespace, idem.outcome and
// idem.attempt (claims), and idem.key.hash: the first 16 hex digits of the
// SHA-256 of the scope and key, which tells two operations apart without
// naming them. A span is recorded when its step has ended (from the step's
// start, which the event's duration gives): the operation's own spans are
// children of the caller's span, siblings of "idem run".
package idemotel
