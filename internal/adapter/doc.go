// Package adapter is the policy every idem adapter shares: the HTTP
// middleware (idemhttp), the gRPC interceptor (idemgrpc) and the message
// consumers. An adapter keeps only what belongs to its protocol (where the
// key travels, how a response is stored and replayed, which status or
// acknowledgement answers each case); everything else is decided here, once:
//
//   - the scope decision: an adapter is built with a scope function
//     (WithScope) or with the explicit decision that all callers share one
//     key space (WithSharedScope), never with neither, and the scope is
//     composed with the key by the Guard ([idem.Guard.DoScoped]), never by
//     string concatenation ([Policy], [Build]);
//   - the key checks that are not protocol-specific: one value only, then
//     the Guard's own length and ValidateKey checks ([Policy.Key]);
//   - what an error of the Guard means ([Classify]): a key in progress, a
//     reused key, a replayed permanent failure, an outcome too large to
//     keep, a store that cannot be reached (what a consumer then does with
//     its message is internal/chassis's verdict);
//   - the logging of outcomes that were not stored, and the option
//     plumbing (errors collected per option, a nil Option refused).
//
// Fail-open is the Guard's alone (idem.Config.FailOpen): the Guard runs the
// operation unguarded, logs and observes it, and an adapter sees a run like
// any other.
//
// # Why internal, and not exported from idem
//
// These pieces are how adapters are written, not what their users call: a
// user configures an adapter with its options and reads its documented
// status table; no user code needs Classify or Policy. Exporting them from
// the core would make them API that every later adapter must keep
// compatible, for no user. Go's internal rule lets every module under
// github.com/idemgo/idem import this package (idemgrpc and the consumer
// adapters are modules of their own) and nothing outside. What users do
// need is exported from the core instead: [idem.Guard.DoScoped],
// [idem.Config.CheckKey], [idem.ErrValueTooLarge], and the store's
// MaxValueSize in [github.com/idemgo/idem/storage.Store].
//
// The package imports the standard library and the core only, like the
// core itself, so the core module stays free of dependencies.
package adapter
