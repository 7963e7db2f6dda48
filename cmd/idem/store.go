package main

import (
	"context"
	"net/url"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/memstore"
)

// openStore opens the store named by rawURL (the --store flag) and returns
// it with the function that closes it. A URL this build cannot open is a
// usageError.
//
//	mem://   an in-process memstore: records live as long as the command
func openStore(ctx context.Context, rawURL string) (idem.Store, func() error, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, nil, usageErrorf("idem: --store %q: not a store URL (want mem://)", rawURL)
	}
	switch u.Scheme {
	case "mem":
		if u.Host != "" || u.Path != "" || u.RawQuery != "" || u.Opaque != "" {
			return nil, nil, usageErrorf("idem: --store %q: mem:// takes no host, path or options", rawURL)
		}
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	}
	return nil, nil, usageErrorf("idem: --store: unsupported scheme %q in %q (supported: mem://)", u.Scheme, rawURL)
}
