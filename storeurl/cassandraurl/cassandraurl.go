// Package cassandraurl links the cassandra:// scheme into [storeurl.Open];
// import it for that side effect:
//
//	import _ "github.com/idemgo/idem/storeurl/cassandraurl"
//
// The URL is cassandrastore's (cassandrastore.ParseURL):
// cassandra://[user:password@]host[:port]/keyspace, with table=,
// consistency=, serial_consistency=, local_dc=, max_clock_skew=, timeout=
// and, for Migrate, replication= (SimpleStrategy:N or
// NetworkTopologyStrategy:dc1=N,dc2=M). Open checks the table
// (cassandrastore's CheckTable), which also shows that Cassandra answers,
// or with [storeurl.Migrate] creates the table (cassandrastore.Migrate),
// and the keyspace first when the URL gives its replication (a keyspace
// that does not exist, with no replication= to create it, is an error). The session is the
// store's own: closing the store closes it.
package cassandraurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/idemgo/idem/cassandrastore"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
	"github.com/idemgo/idem/storeurl/internal/param"
)

func init() { storeurl.Register("cassandra", open) }

func open(ctx context.Context, u *url.URL, o storeurl.Options) (storage.Store, func() error, error) {
	c, err := cassandrastore.ParseURL(u.String())
	if err != nil {
		return nil, nil, &storeurl.URLError{Err: err}
	}
	cluster := c.NewCluster()
	cluster.ConnectTimeout = min(cluster.ConnectTimeout, param.Connect)
	sess, err := cluster.CreateSession()
	if err != nil {
		return nil, nil, errors.Join(storage.ErrStoreUnavailable, err)
	}
	closeStore := func() error { sess.Close(); return nil }
	s, err := cassandrastore.New(sess, c.Config)
	if err != nil {
		closeStore()
		return nil, nil, &storeurl.URLError{Err: err}
	}
	tctx, cancel := context.WithTimeout(ctx, param.Migrate)
	defer cancel()
	if o.Migrate {
		err = cassandrastore.Migrate(tctx, sess, c.Config, c.Replication)
	} else {
		err = s.CheckTable(tctx)
	}
	if err != nil {
		closeStore()
		if errors.Is(err, cassandrastore.ErrNoKeyspace) {
			return nil, nil, &storeurl.URLError{Err: fmt.Errorf("keyspace %s does not exist: add replication=SimpleStrategy:N "+
				"(or NetworkTopologyStrategy:dc1=N,...) to create it", c.Config.Keyspace)}
		}
		return nil, nil, err
	}
	return s, closeStore, nil
}
