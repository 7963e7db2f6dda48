// Package param holds what the scheme packages of storeurl share.
package param

import (
	"net/url"
	"time"
)

// Timeouts of opening a store.
const (
	// Connect bounds dialling a server and its first answer.
	Connect = 10 * time.Second
	// Migrate bounds creating or upgrading a table: a new DynamoDB table
	// takes seconds on AWS.
	Migrate = time.Minute
)

// Take removes the query parameter name from u and returns its last
// value. The drivers' URL parsers refuse (go-redis) or pass on to the
// server (pgx) the parameters they do not know, so the store's own must go
// before they parse.
func Take(u *url.URL, name string) (string, bool) {
	q := u.Query()
	v, ok := q[name]
	if !ok {
		return "", false
	}
	q.Del(name)
	u.RawQuery = q.Encode()
	return v[len(v)-1], true
}
