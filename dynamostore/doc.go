// Package dynamostore keeps idem's records in a DynamoDB table: a [Store]
// over the application's own AWS SDK v2 client, so endpoint, credentials,
// retries and HTTP settings stay the application's.
//
//	cfg, _ := config.LoadDefaultConfig(ctx)
//	client := dynamodb.NewFromConfig(cfg)
//	_ = dynamostore.CreateTable(ctx, client, "idem_records") // or Terraform; see the README
//	store, err := dynamostore.New(client, dynamostore.Config{Table: "idem_records"})
//	g, err := idem.New(store, idem.Config{Namespace: "payments"})
//
// # One item per record
//
// A record is one item. Its partition key "id" (type S) holds the store key
// in unpadded base64url, which is injective, so keys of any bytes never
// share an item. "id" and the TTL attribute "expiration" are the names AWS
// Lambda Powertools' idempotency utility uses: a table made for Powertools
// serves this store unchanged (the items differ; their keys cannot clash,
// as Powertools keys contain '#' and base64url never does). The other
// attributes are listed at [AttrStatus] and the following constants, and
// in the README with the table's Terraform and CloudFormation definitions.
//
// # Every transition is one conditional write
//
// Claim of a key that is absent, or whose record expired, is one PutItem
// conditioned on exactly that. Complete, Fail, Release and Extend are one
// UpdateItem each, conditioned on the caller's token being the record's,
// the record being InProgress and not expired: the fencing token is
// compared by DynamoDB, in the write, never read first and written after.
//
// When a claim's condition fails, the item that failed it answers the
// claim: Busy, Duplicate (with the stored outcome) or ErrKeyReused. DynamoDB
// returns that item with the failure when asked
// (ReturnValuesOnConditionCheckFailure ALL_OLD), so on DynamoDB a duplicate
// costs one request. dynalite, the DynamoDB-compatible server the tests run
// against, accepts the parameter but returns no item; the store then reads
// the item with one strongly consistent GetItem (two requests). It decides
// by what the answer holds, so the same code serves both; the tests check
// both paths, DynamoDB's by adding the item to dynalite's answers as
// DynamoDB would. Writing first and reading only on a failed condition
// makes a new key one request; reading first would make every new key two
// and still need the conditional write. (A failed conditional write is
// billed as a write: a Guard's CacheSize answers repeated duplicates
// without a request at all.)
//
// A record whose lease is over is taken over by one more UpdateItem,
// conditioned on the record being as the claim just saw it (token,
// attempt, status, fingerprint), its lease still over and the record not
// expired. If anything changed meanwhile the condition fails and the item
// that failed it answers again, so of any number of concurrent takeovers
// exactly one succeeds; the attempt in the condition tells apart two
// released states of one record that both have token 0. The same applies
// to the write that marks a record Failed when MaxAttempts is spent.
//
// Tokens are 64 random bits drawn in the process, never zero: they owe
// nothing to the table, so a key's record that expired and was created
// again does not bring one back (two claims draw the same token with odds
// of 2^-64).
//
// # Time is the hosts' clocks
//
// DynamoDB has no clock a condition can read. Lease ends and expiry times
// are written as Unix milliseconds from the writing host's clock
// (Config.Now), and a condition compares them with the reading host's
// clock less Config.MaxClockSkew (default 1s): a lease or record is over
// only when it has been over for MaxClockSkew on the reader's clock. While
// the clocks of all hosts sharing the table are within MaxClockSkew of each
// other, no host takes over a lease before it has ended in real time, nor
// treats an outcome as expired before its retention has passed; a takeover
// after a crash waits up to MaxClockSkew longer. A Guard's holder keeps
// its own deadline on its monotonic clock and is not affected.
//
// When a host's clock runs ahead of another's by more than MaxClockSkew:
//
//   - it sees leases end early, and takes a key over while its holder is
//     still running: the operation runs twice at once. Fencing still holds:
//     the displaced holder's Complete gets ErrLeaseLost and its outcome is
//     not stored; a side effect fenced with the token (idem.TokenFrom) is
//     refused; one that is not happens twice.
//   - it sees outcomes expire early, and runs an operation again before its
//     retention has passed.
//
// A host whose clock is behind sees leases and records last longer: it
// waits longer to take over and replays outcomes longer, which is safe.
// Keep hosts on NTP (on AWS, the Amazon Time Sync Service) and
// MaxClockSkew well above their worst drift.
//
// # Expiry
//
// A record expires at its expires_at time: its retention after its outcome
// was stored, or the claim's retention after its lease ends. Every
// condition treats an expired item as absent, because DynamoDB's Time to
// Live deletes expired items lazily, typically within a few days; until then an
// expired item is only garbage. The item's "expiration" attribute (whole
// seconds, at least MaxClockSkew after expires_at) is what TTL deletes it
// by; [CreateTable] enables TTL on it. dynalite has no TTL: its expired
// items stay until the key is claimed again.
//
// # Batches
//
// [Store.ClaimBatch] and [Store.CompleteBatch] issue one conditional write
// per entry, several at once (Config.BatchConcurrency). BatchWriteItem
// takes no conditions and TransactWriteItems is all or nothing; see
// ClaimBatch for why neither fits.
//
// # Retries of the SDK
//
// The SDK's retryer may send a request again after its reply was lost. A
// resent claim finds its own token in the item and answers Acquired. A
// resent Complete or Fail whose condition fails reads the item, and
// answers success when it holds this call's own outcome (status, token and
// value). A resent Release answers ErrLeaseLost: its first attempt did
// release the key. Extend is idempotent as it is.
//
// # Limits
//
// DynamoDB items hold at most 400 KB, names and values together. Keys are
// at most [MaxKeyLen] bytes, fingerprints at most [MaxFingerprintLen], and
// values at most Config.MaxValueSize (at most [MaxValueSizeLimit], which
// fits the largest key and fingerprint): a longer value gets a
// [*storage.ValueTooLargeError] before anything is sent. [Store.MaxValueSize]
// tells a caller (the HTTP middleware) the limit so that it never hands
// the store a value it must refuse.
//
// # Errors
//
// Sentinels of package storage as the Store contract says; ErrUnknownFormat
// for an item this package did not write (left unchanged); ErrInvalidArgs;
// *storage.ValueTooLargeError; ErrContention (wrapping storage.ErrStoreUnavailable)
// when a record keeps changing under a claim. A missing table, or one of
// another key schema, is an error naming the fix. Everything else from the
// SDK (network, throttling once the client's retries are spent, server
// errors, credentials) wraps storage.ErrStoreUnavailable, with the SDK's error
// in the chain.
package dynamostore
