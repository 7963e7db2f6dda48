// Package sqliteurl links the sqlite:// scheme into [storeurl.Open];
// import it for that side effect:
//
//	import _ "github.com/idemgo/idem/storeurl/sqliteurl"
//
// sqlite://idem.db and sqlite://data/idem.db name a file relative to the
// working directory, sqlite:///var/lib/app/idem.db an absolute one
// (sqlite:idem.db works too). Parameters: table=name sets sqlitestore's
// Config.Table (default idem_records), synchronous=full|normal its
// Config.Synchronous (default full). Open creates the file and its table
// when missing (sqlitestore.Open), whatever [storeurl.Migrate] says.
package sqliteurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/idemgo/idem/sqlitestore"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
	"github.com/idemgo/idem/storeurl/internal/param"
)

func init() { storeurl.Register("sqlite", open) }

func open(ctx context.Context, u *url.URL, _ storeurl.Options) (storage.Store, func() error, error) {
	var cfg sqlitestore.Config
	cfg.Table, _ = param.Take(u, "table")
	switch sync, _ := param.Take(u, "synchronous"); strings.ToLower(sync) {
	case "", "full":
	case "normal":
		cfg.Synchronous = sqlitestore.SyncNormal
	default:
		return nil, nil, &storeurl.URLError{Err: fmt.Errorf("synchronous=%q: want full or normal", sync)}
	}
	path := u.Opaque
	if path == "" {
		path = u.Host + u.Path
	}
	switch {
	case u.RawQuery != "":
		return nil, nil, &storeurl.URLError{Err: fmt.Errorf("unknown options %q (sqlite:// takes table= and synchronous=)", u.RawQuery)}
	case u.User != nil || u.Fragment != "":
		return nil, nil, &storeurl.URLError{Err: errors.New("sqlite:// takes a file's path, no user or fragment")}
	case path == "":
		return nil, nil, &storeurl.URLError{Err: errors.New("no file (sqlite://idem.db, or sqlite:///absolute/path.db)")}
	}
	s, err := sqlitestore.Open(ctx, path, cfg)
	if err != nil {
		if strings.HasPrefix(err.Error(), "sqlitestore: Config.") || strings.HasPrefix(err.Error(), "sqlitestore: Open: path") {
			return nil, nil, &storeurl.URLError{Err: err}
		}
		return nil, nil, err
	}
	return s, s.Close, nil
}
