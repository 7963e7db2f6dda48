// Package idemhttp is net/http middleware that makes POST and PATCH
// requests idempotent with an [idem.Guard], following the IETF draft "The
// Idempotency-Key HTTP Header Field" and Stripe's behaviour. Keys must be
// scoped by the authenticated caller ([WithScope]): unscoped, one client
// can be sent another's stored response (see "Scope keys by the caller").
//
// A client sends a unique key with a request and the same key with every
// retry of it:
//
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// The first request runs the handler; its response goes to the client as
// the handler writes it and is stored. A retry gets the stored response
// back, status, header fields and body byte for byte, with
// "Idempotent-Replayed: true", and the handler does not run again:
//
//	g, _ := idem.New(store, idem.Config{Namespace: "payments", Wait: 10 * time.Second})
//	mw, err := idemhttp.New(g, idemhttp.WithScope(accountID), idemhttp.WithRequired())
//	http.Handle("POST /charges", authenticate(mw(chargeHandler)))
//
// # Scope keys by the caller
//
// A stored response belongs to whoever sent the key first. Without a
// scope, any client that sends the same key and request gets that response,
// with its headers; and a client that sends a guessable key first makes its
// victim receive the attacker's response (the IETF draft's Security
// Considerations; Stripe scopes keys by account). [New] therefore refuses
// to build the middleware without a decision: [WithScope] names the
// authenticated principal of each request, so that two principals never
// share a record, or [WithSharedScope] says deliberately that all clients
// share one key space. Run the middleware after authentication.
//
// # What the middleware answers
//
// This table is the rule; the tests hold the middleware to it.
//
//	request                                               status                   handler
//	method not covered (default: other than POST, PATCH)  the handler's            runs
//	no key                                                the handler's            runs
//	no key, WithRequired                                  400                      no
//	key empty, repeated, malformed or too long            400                      no
//	key refused by the Guard's Config.ValidateKey         400                      no
//	scope longer than idem.MaxScopeLen                    400                      no
//	body longer than WithMaxBodyBytes                     413                      no
//	body unreadable, or not its Content-Length            400                      no
//	the scope or fingerprint function panics (logged)     500                      no
//	new key                                               the handler's            runs once
//	  handler answers 2xx, 3xx or 4xx                     the handler's            stored
//	  handler answers 408, 425, 429 or 499 [1]            the handler's            key released
//	  handler answers 5xx [2]                             the handler's            key released
//	  request ended before the handler answered [3]       (none)                   key released
//	  body longer than WithMaxCachedBytes, or the stored
//	    form longer than the store keeps [4]              the handler's, in full   stored without body
//	  connection hijacked, or 101                         the handler's            key released
//	  handler panics                                      (the panic goes on)      key released
//	key done before                                       the stored response [5]  no
//	key done before, stored without its body [4]          its status, a problem    no
//	key used before with another request                  422                      no
//	key in progress (after the Guard's Wait)              409 + Retry-After        no
//	key claimed over the Guard's MaxAttempts              422                      no
//	key's first request failed permanently [6]            422                      no
//	store unavailable                                     503 + Retry-After        no
//	store unavailable, the Guard's Config.FailOpen        the handler's            runs, unguarded
//	stored response undecodable                           500                      no
//	request ended while claiming or waiting               503 + Retry-After        no
//
//	[1] they ask the client to retry (499: the client went away); storing
//	    them would refuse the retry for as long as the record is kept
//	[2] stored and replayed with WithCacheServerErrors
//	[3] the handler wrote nothing and its context ended (client gone, lease
//	    lost, Guard closed): nothing it did is an answer to keep
//	[4] the store's limit is its MaxValueSize (storage.Store). The retry gets the
//	    first status and kept fields, Idempotent-Replayed: true, and a
//	    problem of type TypeResponseNotKept; a warning is logged and the
//	    Guard's Observer sees idem.OpTooLarge
//	[5] with Idempotent-Replayed: true; the handler's status, fields and body
//	[6] an idem.Permanent failure stored under the key by other code sharing
//	    the Guard's namespace: problem type TypeStoredFailure
//
// Every refusal is an application/problem+json body (RFC 9457) written by
// [DefaultErrorHandler] from an *[Error]; [WithErrorHandler] replaces it.
// 4xx responses of the handler are stored and replayed, as Stripe does: a
// request that was refused for its content is refused again the same way,
// and a client that fixes it sends a new key.
//
// # What is stored of a response
//
// The status, the body and the end-to-end header fields the handler set,
// except: fields already set on the ResponseWriter before the middleware
// ran (an outer handler's request id, a rotated cookie) and left as they
// were by the handler, which belong to that request and are neither stored
// nor overwritten on a replay (a field the handler changed, a
// Content-Type or Cache-Control over an outer default, is stored and
// replaces the outer value on a replay, as in the first response); the
// per-caller fields of [DefaultUnstoredHeaders] (Set-Cookie and the like,
// see [WithUnstoredHeaders]); hop-by-hop fields, Date and trailers.
//
// # The key
//
// The draft sends the key as an RFC 8941 String, quoted. Stripe-style
// clients send it bare; the [Lenient] syntax, the default, accepts both, and
// [Strict] only the quoted form (see [ParseKey]). A request may carry one
// key header only. The key's length and format are the Guard's: at most its
// Config.MaxKeyLen bytes (255 by default), and accepted by its
// Config.ValidateKey if set (say, a UUID check, as the draft suggests).
//
// The request's fingerprint is its method, path, query and body
// ([DefaultFingerprint], [WithFingerprint]): a retry with the same key and a
// different request gets 422. The body is read, up to [WithMaxBodyBytes],
// before the handler runs, and given back to it unchanged; its buffer grows
// as bytes arrive. Set the server's ReadHeaderTimeout and ReadTimeout
// (net/http.Server) so that a client that sends slowly, or never, cannot
// hold a connection and its buffer for long.
//
// The Guard composes its namespace, the scope and the key into the store
// key ([github.com/idemgo/idem/storage.ScopedStoreKey]);
// g.ScopedStoreKey(scope, key) finds a client's record for inspection.
//
// # Concurrency, waiting and failures
//
// A request whose key is being processed gets 409 with Retry-After, or,
// when the Guard's Config.Wait is set, waits that long for the outcome and
// replays it. The Guard writes the outcome under a context detached from the
// request's, so a client that disconnects once the handler ran still finds
// its response on retry. While the handler runs its request context carries
// the lease token ([idem.TokenFrom]) and is cancelled if the lease is lost.
//
// The response is written through to the client as the handler writes it;
// [http.Flusher] and [http.ResponseController] (flush, deadlines, hijack)
// work through the middleware's writer. A replay gets a fresh Date from
// net/http.
//
// The stored value is a small versioned binary encoding of the response
// ([EncodeResponse], [DecodeResponse]).
package idemhttp
