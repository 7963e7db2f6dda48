package storeurl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

// Open opens the store that rawURL names (see the package doc for the
// schemes) and returns it with the function that closes it: the store's
// connections, pool or file. It waits for the server to answer (a ping, at
// most 10 seconds; a DynamoDB table check or a migration, at most a
// minute; never longer than ctx allows) so that a server that cannot be
// reached is Open's error and not the first request's.
//
// A URL that is not one of a linked scheme's, or whose parameters the
// store refuses, is an [*URLError]. A server that does not answer is an
// error wrapping [storage.ErrStoreUnavailable]. A Redis whose
// maxmemory-policy may evict records is refused with redisstore's
// *EvictionPolicyError. No error prints a secret of rawURL.
func Open(ctx context.Context, rawURL string, opts ...Option) (s storage.Store, closeStore func() error, err error) {
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	shown, secrets := Redact(rawURL), Secrets(rawURL)
	if ambiguousUserInfo(rawURL) {
		// A driver would read a piece of the password as the host or
		// the path, and repeat it where no scrub finds it whole.
		return nil, nil, &URLError{URL: shown, Err: errors.New(`the password holds an unescaped "/", "?" or "#", or an "@" follows the host: percent-encode them (%2F, %3F, %23, %40)`)}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, &URLError{URL: shown, Err: scrub(parseError(err), secrets)}
	}
	if u.Scheme == "" {
		return nil, nil, &URLError{URL: shown, Err: fmt.Errorf("no scheme (want %s)", schemeList())}
	}
	open, ok := opener(u.Scheme)
	if !ok {
		if pkg, known := schemePackages[u.Scheme]; known {
			return nil, nil, &URLError{URL: shown, Err: fmt.Errorf("the %s:// scheme is not linked into this program: import _ %q", u.Scheme, pkg)}
		}
		return nil, nil, &URLError{URL: shown, Err: fmt.Errorf("unsupported scheme %q (want %s)", u.Scheme, schemeList())}
	}
	s, closeStore, err = open(ctx, u, o)
	if err != nil {
		if ue, ok := errors.AsType[*URLError](err); ok {
			return nil, nil, &URLError{URL: shown, Err: scrub(ue.Err, secrets)}
		}
		return nil, nil, fmt.Errorf("storeurl: %s: %w", shown, scrub(err, secrets))
	}
	return s, closeStore, nil
}

// Option changes what [Open] does.
type Option func(*Options)

// Migrate makes [Open] create or upgrade the store's table before it
// returns the store (see the package doc's Tables).
func Migrate() Option { return func(o *Options) { o.Migrate = true } }

// Options are [Open]'s options, as an [Opener] is given them.
type Options struct {
	// Migrate: create or upgrade the store's table first ([Migrate]).
	Migrate bool
}

// Opener opens the store of a URL whose scheme it was registered for, and
// returns it with the function that closes it. It may change u (to take
// out the parameters it reads). It returns an [*URLError] when the URL is
// at fault (its Err only: [Open] fills in the URL) and any other error
// when the store cannot be opened; Open adds the redacted URL to the
// message and scrubs the URL's secrets from it.
type Opener func(ctx context.Context, u *url.URL, o Options) (storage.Store, func() error, error)

var (
	mu      sync.RWMutex
	openers = map[string]Opener{"mem": openMem}
)

// schemePackages names the package that links each scheme idem ships.
var schemePackages = map[string]string{
	"redis":      "github.com/idemgo/idem/storeurl/redisurl",
	"rediss":     "github.com/idemgo/idem/storeurl/redisurl",
	"postgres":   "github.com/idemgo/idem/storeurl/pgurl",
	"postgresql": "github.com/idemgo/idem/storeurl/pgurl",
	"dynamodb":   "github.com/idemgo/idem/storeurl/dynamourl",
	"cassandra":  "github.com/idemgo/idem/storeurl/cassandraurl",
	"sqlite":     "github.com/idemgo/idem/storeurl/sqliteurl",
}

// Register makes [Open] open the URLs of scheme (lower case, without
// "://") with open. The scheme packages (see the package doc) call it from
// their init functions; a program may add a scheme of its own. It panics
// if scheme is already registered, or open is nil, as database/sql's
// Register does.
func Register(scheme string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	switch {
	case open == nil:
		panic("storeurl: Register of scheme " + scheme + " with a nil Opener")
	case scheme == "" || scheme != strings.ToLower(scheme) || strings.Contains(scheme, ":"):
		panic("storeurl: Register: scheme " + scheme + ": want a lower-case scheme without ':'")
	case openers[scheme] != nil:
		panic("storeurl: Register: scheme " + scheme + " registered twice")
	}
	openers[scheme] = open
}

func opener(scheme string) (Opener, bool) {
	mu.RLock()
	defer mu.RUnlock()
	o, ok := openers[scheme]
	return o, ok
}

// schemeList lists the linked schemes, for messages.
func schemeList() string {
	mu.RLock()
	defer mu.RUnlock()
	names := slices.Sorted(maps.Keys(openers))
	for i, n := range names {
		names[i] = n + "://"
	}
	return strings.Join(names, ", ")
}

// URLError is the error of [Open] for a URL it cannot use: not a URL, a
// scheme not linked, a parameter the store refuses. It is a mistake of
// the URL, not a state of the server: a command line reports it as a
// usage error.
type URLError struct {
	// URL is the URL as [Redact] writes it.
	URL string
	// Err says what is wrong with it; its message holds no secret of the
	// URL.
	Err error
}

func (e *URLError) Error() string { return "storeurl: " + e.URL + ": " + e.Err.Error() }

func (e *URLError) Unwrap() error { return e.Err }

// parseError says what url.Parse found wrong without repeating the URL,
// nor the part of it that is wrong (a malformed escape may sit in a
// password).
func parseError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var esc url.EscapeError
	var host url.InvalidHostError
	switch {
	case errors.As(err, &esc):
		return errors.New("not a URL: a malformed %-escape")
	case errors.As(err, &host):
		return errors.New("not a URL: invalid characters in its host")
	}
	// The parser quotes the piece it could not read ("invalid port
	// \":pw\" after host"): a piece of a secret, which no scrub of the
	// whole secret finds.
	return errors.New("not a URL: " + quoted.ReplaceAllString(err.Error(), "…"))
}

// quoted matches a quoted piece of a message.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// openMem opens a memstore: mem:// takes nothing else.
func openMem(_ context.Context, u *url.URL, _ Options) (storage.Store, func() error, error) {
	if u.Host != "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Opaque != "" || u.Fragment != "" {
		return nil, nil, &URLError{Err: errors.New("mem:// takes no host, path or options")}
	}
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}
