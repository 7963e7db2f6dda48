// Package idemgrpc is a gRPC server interceptor that makes unary calls
// idempotent with an [idem.Guard]. A client sends a unique key in the
// "idempotency-key" metadata with a call and the same key with every retry
// of it; the first call runs the handler and its outcome is stored, a retry
// gets that outcome back, with the trailer "idempotent-replayed: true", and
// the handler does not run again. Keys must be scoped by the authenticated
// caller ([WithScope]): unscoped, one client can be sent another's stored
// response (see "Scope keys by the caller").
//
//	g, _ := idem.New(store, idem.Config{Namespace: "payments", Wait: 10 * time.Second})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
//		recovery,                                  // outside: sees the handler's panics
//		auth,                                      // before: WithScope reads its principal
//		idemgrpc.UnaryServerInterceptor(g, idemgrpc.WithScope(principal), idemgrpc.WithMethods(mutations)),
//	), grpc.ChainStreamInterceptor(idemgrpc.StreamServerInterceptor(g, idemgrpc.WithScope(principal))))
//
// # Scope keys by the caller
//
// A stored outcome belongs to whoever sent the key first. Without a scope,
// any client that sends the same key and request gets that outcome; and a
// client that sends a guessable key first makes its victim receive the
// attacker's response (the IETF Idempotency-Key draft's Security
// Considerations; Stripe scopes keys by account). [New] therefore refuses
// to build the interceptor without a decision: [WithScope] names the
// authenticated principal of each call, so two principals never share a
// record, or [WithSharedScope] says deliberately that all clients share one
// key space. Chain the interceptor after authentication.
//
// # What the interceptor answers
//
//	call                                           code                    handler
//	method not covered (WithMethods; a read [1])   the handler's           runs
//	no key                                         the handler's           runs
//	no key, WithRequired                           InvalidArgument         no
//	key empty, repeated, too long, refused [2]     InvalidArgument         no
//	request not fingerprintable (not proto)        Internal                no
//	the scope, fingerprint or WithMethods function
//	  panics (logged)                              Internal                no
//	new key                                        the handler's           runs once
//	  success                                      OK                      stored
//	  error with a permanent code [3]              the handler's           stored
//	  error with another code, or a panic          the handler's           key released
//	  response not a proto.Message                 OK                      key released
//	  response larger than the store keeps         OK                      ErrValueTooLarge stored
//	key done before                                the stored outcome [4]  no
//	key used before with another request           InvalidArgument         no
//	key in progress (after the Guard's Wait)       Aborted                 no
//	key claimed over the Guard's MaxAttempts       FailedPrecondition [4]  no
//	key's response was too large to keep           AlreadyExists [4]       no
//	store unavailable                              Unavailable             no
//	store unavailable, the Guard's FailOpen        the handler's           runs, unguarded
//	stored response not replayable                 Internal                no
//	context ended while claiming or waiting        Canceled, DeadlineExceeded
//	streaming call with a key                      Unimplemented           no
//
//	[1] by default, a method declared idempotency_level = NO_SIDE_EFFECTS
//	[2] by the Guard's Config.MaxKeyLen (255 bytes by default) and
//	    Config.ValidateKey; a scope longer than idem.MaxScopeLen too
//	[3] DefaultPermanentCodes: InvalidArgument, NotFound, AlreadyExists,
//	    PermissionDenied, FailedPrecondition, OutOfRange, Unimplemented
//	    (WithPermanentCodes), and any error the handler marks idem.Permanent
//	[4] with the trailer idempotent-replayed: true; a stored outcome is the
//	    response message, or the error's code, message and details
//
// The fingerprint of a call is its full method and its request's
// deterministic protobuf encoding ([DefaultFingerprint], [WithFingerprint]).
// A response is stored as its message name and encoding
// ([EncodeResponse]): a replay finds the type by name in
// protoregistry.GlobalTypes ([WithTypes]), so it needs no earlier run in the
// process. Header and trailer metadata the handler set are not stored; a
// replay carries only the replayed trailer.
//
// A permanent error is stored as an idem.Permanent failure whose text is
// the whole status, so the replay has the same code, message and details.
//
// # Which methods are guarded
//
// By default every unary method that receives a key is guarded, except
// those whose proto declares them reads, "option idempotency_level =
// NO_SIDE_EFFECTS;" (found in protoregistry.GlobalFiles): a read needs no
// idempotency, and storing its answer would replay stale data. Name the
// methods that mutate with [WithMethods] when your protos do not declare
// their reads; the examples do.
//
// # Streaming calls
//
// A streaming call has no single request to fingerprint before the handler
// runs, nor a single response to store: a client stream would have to be
// read whole first, and a server stream stored whole, however long. The
// stream interceptor ([Interceptor.Stream], [StreamServerInterceptor])
// therefore refuses a covered streaming call that carries a key with
// codes.Unimplemented, so a client that asks for idempotency never silently
// goes without it; calls without a key pass. Make a mutation that needs
// idempotency a unary method, and stream its results separately.
package idemgrpc
