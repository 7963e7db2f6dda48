// Package redisurl links the redis:// and rediss:// schemes into
// [storeurl.Open]; import it for that side effect:
//
//	import _ "github.com/idemgo/idem/storeurl/redisurl"
//
// The URL is go-redis's (redis.ParseURL):
// redis://[user:password@]host:port[/db][?option=…], rediss:// for TLS, with
// one parameter of idem's own: prefix= sets redisstore's Config.Prefix
// (default idem:). Open pings the server, and redisstore.New then refuses
// a server whose maxmemory-policy may evict records (an
// *redisstore.EvictionPolicyError).
package redisurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
	"github.com/idemgo/idem/storeurl/internal/param"
)

func init() {
	storeurl.Register("redis", open)
	storeurl.Register("rediss", open)
}

func open(ctx context.Context, u *url.URL, _ storeurl.Options) (storage.Store, func() error, error) {
	prefix, _ := param.Take(u, "prefix")
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, nil, &storeurl.URLError{Err: err}
	}
	client := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, param.Connect)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("cannot reach Redis: %w: %w", storage.ErrStoreUnavailable, err)
	}
	s, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	if err != nil {
		client.Close()
		// New reads the server's maxmemory-policy: a server that went
		// away since the ping, or one that may evict records, is the
		// server's state, not the URL's.
		if errors.Is(err, storage.ErrStoreUnavailable) {
			return nil, nil, fmt.Errorf("cannot reach Redis: %w", err)
		}
		if _, ok := errors.AsType[*redisstore.EvictionPolicyError](err); ok {
			return nil, nil, err
		}
		return nil, nil, &storeurl.URLError{Err: err}
	}
	return s, client.Close, nil
}
