package adapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/idemgo/idem"
)

// Names are what an adapter calls its parts, for its error messages.
type Names struct {
	// Pkg is the adapter's package name, which starts every message.
	Pkg string
	// Request is the type its scope function takes, as written in Go
	// ("*http.Request", "context.Context").
	Request string
	// Key names where the key travels ("the Idempotency-Key header"), for
	// an adapter whose options cannot rename it (see [Policy.SetKeyName]).
	Key string
	// Threat, when set, ends the error of a missing scope decision: what
	// else a missing scope lets one caller do to another, for an adapter
	// whose keys are chosen by others than its callers (a consumer's
	// publishers).
	Threat string
}

// Policy holds the settings every adapter has, for requests or messages of
// type M, and the behaviour that follows from them. An adapter's options
// struct embeds a Policy, its Option functions call the Set methods, and
// its constructor calls [Build], after which the Policy is read-only and
// safe for concurrent use.
type Policy[M any] struct {
	names       Names
	keyName     string
	g           *idem.Guard
	cfg         idem.Config
	scope       func(M) string
	sharedScope bool
	required    bool
	logger      *slog.Logger
	errs        []error
}

// Fail records a configuration error; the message is prefixed with the
// adapter's package name by [Build].
func (p *Policy[M]) Fail(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf(format, args...))
}

// Check reports whether ok, and records the configuration error that
// format and args describe when not: an option sets its value only when
// its argument passed, as in
//
//	if o.Check(f != nil, "WithFingerprint(nil)") {
//		o.fingerprint = f
//	}
func (p *Policy[M]) Check(ok bool, format string, args ...any) bool {
	if !ok {
		p.Fail(format, args...)
	}
	return ok
}

// SetScope is the adapter's WithScope.
func (p *Policy[M]) SetScope(f func(M) string) {
	if p.Check(f != nil, "WithScope(nil)") {
		p.scope = f
	}
}

// SetSharedScope is the adapter's WithSharedScope.
func (p *Policy[M]) SetSharedScope() { p.sharedScope = true }

// SetKeyName names where the key travels, for an option that moves it
// (WithHeader, WithMetadataKey); it replaces Names.Key.
func (p *Policy[M]) SetKeyName(name string) { p.keyName = name }

// SetRequired is the adapter's WithRequired.
func (p *Policy[M]) SetRequired() { p.required = true }

// SetLogger is the adapter's WithLogger.
func (p *Policy[M]) SetLogger(l *slog.Logger) {
	if p.Check(l != nil, "WithLogger(nil)") {
		p.logger = l
	}
}

// Build applies opts to o, whose Policy is p, and checks the result: a nil
// Option, an option that failed, what check (when not nil) finds wrong
// with the adapter's own options once they are applied (p.Fail), and a
// missing or double scope decision are errors, all reported at once, each
// starting with names.Pkg. The Policy runs over the Guard g and uses its
// configuration's key checks and logger; an adapter that runs its
// operations with another executor (a TxGuard) passes a nil g and that
// executor's configuration cfg instead. A nil g without a cfg is an error.
func Build[O any, F ~func(*O), M any](o *O, p *Policy[M], names Names, g *idem.Guard, cfg *idem.Config, opts []F, check func()) error {
	switch {
	case g != nil:
		c := g.Config()
		cfg = &c
	case cfg == nil:
		return fmt.Errorf("%s: New: Guard is nil", names.Pkg)
	}
	p.names = names
	for _, opt := range opts {
		if opt == nil {
			p.Fail("New: nil Option")
			continue
		}
		opt(o)
	}
	if check != nil {
		check()
	}
	return p.finish(g, *cfg)
}

// finish checks the scope decision and returns every error recorded, each
// starting with the adapter's package name; when there is none, the Policy
// is ready, over the Guard g (nil for an adapter that runs its operations
// with another executor) and the configuration cfg.
func (p *Policy[M]) finish(g *idem.Guard, cfg idem.Config) error {
	names := p.names
	switch {
	case p.scope == nil && !p.sharedScope:
		p.Fail("New: no scope decision. Pass WithScope(func(%s) string), naming the principal "+
			"(account, API key) a call acts for, or WithSharedScope() if every caller may share one key space. "+
			"Without a scope, a caller that sends another caller's key with the same payload receives that "+
			"caller's stored outcome (its response, headers and cookies), and a caller that sends a guessable "+
			"key first makes its victim receive the attacker's outcome "+
			"(IETF draft-ietf-httpapi-idempotency-key-header, Security Considerations)%s", names.Request, names.Threat)
	case p.scope != nil && p.sharedScope:
		p.Fail("New: WithScope and WithSharedScope are both given: choose one")
	}
	for i, err := range p.errs {
		p.errs[i] = fmt.Errorf("%s: %w", names.Pkg, err)
	}
	if err := errors.Join(p.errs...); err != nil {
		return err
	}
	p.g, p.cfg, p.errs = g, cfg, nil
	if p.keyName == "" {
		p.keyName = names.Key
	}
	if p.logger == nil {
		p.logger = cfg.Logger
	}
	if p.logger == nil {
		p.logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Names returns what the adapter calls its parts.
func (p *Policy[M]) Names() Names { return p.names }

// Config returns the configuration of the Guard (or executor) the Policy
// was finished with.
func (p *Policy[M]) Config() idem.Config { return p.cfg }

// Guard returns the Guard the adapter runs its operations with.
func (p *Policy[M]) Guard() *idem.Guard { return p.g }

// Logger returns the adapter's logger: WithLogger's, else the Guard's.
func (p *Policy[M]) Logger() *slog.Logger { return p.logger }

// Scope returns the scope of m: the scope function's answer, or "" with
// WithSharedScope.
func (p *Policy[M]) Scope(m M) string {
	if p.scope == nil {
		return ""
	}
	return p.scope(m)
}

// FuncPanic is the panic of a function the user gave the adapter besides
// its handler (a scope or fingerprint function) on one request.
type FuncPanic struct {
	Func  string // the function, as "the scope function (WithScope)"
	Value any    // what it panicked with
	Stack []byte // the goroutine's stack at the panic
}

func (e *FuncPanic) Error() string { return fmt.Sprintf("%s panicked: %v", e.Func, e.Value) }

// Protect runs call, a call of the user's function fn, and returns its
// panic as a *FuncPanic, logged at error level with its stack. Such a
// function reads what the client sent: its panic is that request's, to be
// answered as a server error, and must not end the process (a gRPC server
// recovers no panic) nor be left to net/http, which drops the connection
// without an answer.
func (p *Policy[M]) Protect(ctx context.Context, fn string, call func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = p.Panicked(ctx, fn, v)
		}
	}()
	call()
	return nil
}

// Panicked returns v, recovered from the user's function fn, as a
// *FuncPanic, logged at error level with its stack; the deferred function
// that recovered v calls it.
func (p *Policy[M]) Panicked(ctx context.Context, fn string, v any) *FuncPanic {
	fp := &FuncPanic{Func: fn, Value: v, Stack: debug.Stack()}
	p.logger.LogAttrs(ctx, slog.LevelError, p.names.Pkg+": "+fp.Error(), slog.String("stack", string(fp.Stack)))
	return fp
}

// ValueLimit returns the longest value the Guard's store keeps, or 0 when
// it keeps any (storage.Store.MaxValueSize). An adapter keeps what it
// stores within it, less its encoding's overhead, so that the store never
// refuses an outcome for its size.
func (p *Policy[M]) ValueLimit() int {
	return max(0, p.g.Store().MaxValueSize())
}

// TooLarge reports an answer of size bytes that was too large to store as
// it is and was stored without its body: a warning in the log, and
// idem.OpTooLarge with err to the Guard's Observer.
func (p *Policy[M]) TooLarge(ctx context.Context, scope, key string, size int, err error) {
	p.logger.LogAttrs(ctx, slog.LevelWarn, p.names.Pkg+": answer too large to keep: stored without its body",
		slog.String("namespace", p.cfg.Namespace), slog.String("scope", scope), slog.String("key", key),
		slog.Int("size", size), slog.Any("error", err))
	if p.cfg.Observer != nil {
		// Recovered as the Guard recovers it: this runs inside the
		// operation, whose panic would release a key that answered.
		p.Protect(ctx, "the Guard's Observer", func() {
			p.cfg.Observer(ctx, idem.Event{Op: idem.OpTooLarge, Namespace: p.cfg.Namespace, Scope: scope, Key: key, Err: err})
		})
	}
}

// ErrKeyMissing is wrapped by [Policy.Key]'s error for a request or message
// that carries no key although the adapter requires one (WithRequired). It
// wraps idem.ErrInvalidKey: a missing key is the empty key.
var ErrKeyMissing = fmt.Errorf("%w: missing", idem.ErrInvalidKey)

// keyError is a refused key: its message is the reason alone, for the
// adapter to put after its own sentinel.
type keyError struct {
	msg     string
	missing bool
	err     error // the parser's or the Guard's error, if any
}

func (e *keyError) Error() string { return e.msg }
func (e *keyError) Unwrap() error { return e.err }

func (e *keyError) Is(target error) bool {
	return target == idem.ErrInvalidKey || (e.missing && target == ErrKeyMissing)
}

// Key returns the idempotency key that values carry (every value of the
// header, metadata entry or message header that holds it), parsed by parse
// when it is not nil. A request without a key gets "" and nil, or, when the
// adapter requires keys, an error wrapping [ErrKeyMissing]. A key sent more
// than once, refused by parse, or refused by the Guard's checks (empty,
// longer than its Config.MaxKeyLen, refused by its Config.ValidateKey) gets
// an error wrapping idem.ErrInvalidKey whose message says why, fit to show
// the client.
func (p *Policy[M]) Key(values []string, parse func(string) (string, error)) (string, error) {
	switch {
	case len(values) == 0 && p.required:
		return "", &keyError{msg: p.keyName + " is missing", missing: true}
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", &keyError{msg: fmt.Sprintf("%s is sent %d times; send it once", p.keyName, len(values))}
	}
	key := values[0]
	if parse != nil {
		var err error
		if key, err = parse(key); err != nil {
			return "", &keyError{msg: err.Error(), err: err}
		}
	}
	if err := p.cfg.CheckKey("", key); err != nil {
		return "", &keyError{msg: reason(err, idem.ErrInvalidKey), err: err}
	}
	return key, nil
}

// reason returns err's message without the sentinel's text it starts with.
func reason(err, sentinel error) string {
	msg, prefix := err.Error(), sentinel.Error()+": "
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return msg[len(prefix):]
	}
	return msg
}

// NotStored is the error an adapter's operation returns for an answer that
// was given but is not to be stored (a server error, a hijacked
// connection, a response that cannot be encoded): the Guard releases the
// key, so a retry runs the operation again.
type NotStored struct {
	// Reason says why, for the log.
	Reason string
	// Err is the cause, if any.
	Err error
}

func (e *NotStored) Error() string {
	if e.Err != nil {
		return "answer not stored: " + e.Reason + ": " + e.Err.Error()
	}
	return "answer not stored: " + e.Reason
}

// Unwrap returns the cause.
func (e *NotStored) Unwrap() error { return e.Err }

// Ran logs what a caller should know once the operation ran and answered
// its client, given the Guard's error err: an answer that was not stored
// (debug: a retry runs the operation again, as the adapter's status table
// says), or an outcome the store did not take (warning: a retry may run the
// operation again). The operation's own errors are the client's answer and
// are not logged.
func (p *Policy[M]) Ran(ctx context.Context, err error, attrs ...slog.Attr) {
	if err == nil {
		return
	}
	if ns, ok := errors.AsType[*NotStored](err); ok {
		p.logger.LogAttrs(ctx, slog.LevelDebug, p.names.Pkg+": answered, not stored: a retry runs again",
			append(attrs, slog.String("reason", ns.Error()))...)
		return
	}
	if errors.Is(err, idem.ErrStoreUnavailable) || errors.Is(err, idem.ErrLeaseLost) {
		p.logger.LogAttrs(ctx, slog.LevelWarn, p.names.Pkg+": answered, but the outcome was not stored: a retry may run again",
			append(attrs, slog.Any("error", err))...)
	}
}
