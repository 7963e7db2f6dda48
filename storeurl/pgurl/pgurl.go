// Package pgurl links the postgres:// and postgresql:// schemes into
// [storeurl.Open]; import it for that side effect:
//
//	import _ "github.com/idemgo/idem/storeurl/pgurl"
//
// The URL is pgx's (pgxpool.ParseConfig):
// postgres://user[:password]@host:port/db[?option=…], with one parameter of
// idem's own: table=[schema.]name sets pgstore's Config.Table (default
// idem_records). Open connects a pool and pings the server; with
// [storeurl.Migrate] it runs pgstore.Migrate. Closing the store closes
// the pool.
package pgurl

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
	"github.com/idemgo/idem/storeurl/internal/param"
)

func init() {
	storeurl.Register("postgres", open)
	storeurl.Register("postgresql", open)
}

func open(ctx context.Context, u *url.URL, o storeurl.Options) (storage.Store, func() error, error) {
	table, _ := param.Take(u, "table")
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, nil, &storeurl.URLError{Err: err}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	s, err := pgstore.New(pool, pgstore.Config{Table: table})
	if err != nil {
		pool.Close()
		return nil, nil, &storeurl.URLError{Err: err}
	}
	pctx, cancel := context.WithTimeout(ctx, param.Connect)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("cannot reach PostgreSQL: %w: %w", storage.ErrStoreUnavailable, err)
	}
	if o.Migrate {
		mctx, cancel := context.WithTimeout(ctx, param.Migrate)
		defer cancel()
		if err := pgstore.Migrate(mctx, pool, table); err != nil {
			pool.Close()
			return nil, nil, err
		}
	}
	return s, func() error { pool.Close(); return nil }, nil
}
