// Package storage is the contract between idem's executors (the
// [github.com/idemgo/idem.Guard], the transactional guards) and the stores
// that keep idempotency records: what a store author implements, and what
// an operator's tool reads.
//
// A store implements [Store]: one record per key, each method one atomic
// transition of the record's state machine (see package idem's
// documentation), fenced by [Token]. Every rule of the contract is checked
// by the conformance suite in [github.com/idemgo/idem/idemtest], which a
// store runs from its own tests against its real server. A store without a
// batch call of its own answers ClaimBatch and CompleteBatch with
// [ClaimEach] and [CompleteEach].
//
// Users of idem do not need this package: they pass a store (memstore,
// redisstore, pgstore, …) to idem.New and read outcomes from
// [github.com/idemgo/idem.Result].
//
// # Failures
//
// The result of a Failed record is an encoded failure, in one format that
// every executor and store shares: [EncodeFailure] writes it,
// [DecodeFailure] reads it back, and a store that fails a record for the
// attempt cap writes [TooManyAttemptsCause] itself.
//
// # Store keys
//
// The Guard combines a namespace, a scope (tenant, principal) and the
// caller's key into one store key ([ScopedStoreKey]): length-prefixed, so
// no two triples share a key whatever bytes they hold. [SplitStoreKey]
// takes one apart; [NamespacePrefix] is the prefix of a namespace's keys,
// for [Scanner.Scan].
package storage
