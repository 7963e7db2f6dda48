package storeurl

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgo/idem/storage"
)

// A URL of a scheme idem ships whose package the program did not import
// is a URL error that says which package to import.
func TestSchemeNotLinked(t *testing.T) {
	mu.Lock()
	saved, linked := openers["redis"]
	delete(openers, "redis")
	mu.Unlock()
	t.Cleanup(func() {
		if linked {
			mu.Lock()
			openers["redis"] = saved
			mu.Unlock()
		}
	})
	_, _, err := Open(context.Background(), "redis://:S3cretPw@127.0.0.1:6379/0")
	if _, ok := errors.AsType[*URLError](err); !ok ||
		!strings.Contains(err.Error(), `import _ "github.com/idemgo/idem/storeurl/redisurl"`) || strings.Contains(err.Error(), "S3cretPw") {
		t.Fatalf("a scheme not linked: %v; want a URL error naming the package to import, without the password", err)
	}
}

// A scheme of the program's own: Open hands it its URLs, fills in the
// redacted URL of the URL errors it returns, and scrubs the secrets its
// errors repeat while errors.Is still finds what they wrap.
func TestRegisteredScheme(t *testing.T) {
	Register("idemtest-ok", func(_ context.Context, u *url.URL, o Options) (storage.Store, func() error, error) {
		if !o.Migrate || u.Host != "h" {
			return nil, nil, errors.New("not the URL and options given to Open")
		}
		return nil, func() error { return nil }, nil
	})
	Register("idemtest-bad", func(_ context.Context, u *url.URL, _ Options) (storage.Store, func() error, error) {
		return nil, nil, &URLError{Err: errors.New("refused " + u.String())}
	})
	Register("idemtest-down", func(_ context.Context, u *url.URL, _ Options) (storage.Store, func() error, error) {
		return nil, nil, errors.Join(storage.ErrStoreUnavailable, errors.New("dial "+u.String()))
	})
	if _, _, err := Open(context.Background(), "idemtest-ok://h", Migrate()); err != nil {
		t.Fatal(err)
	}
	_, _, err := Open(context.Background(), "idemtest-bad://u:S3cretPw@h")
	if ue, ok := errors.AsType[*URLError](err); !ok || ue.URL != "idemtest-bad://u:xxxxx@h" || !strings.Contains(err.Error(), "refused idemtest-bad://u:xxxxx@h") {
		t.Errorf("an opener's URL error: %v", err)
	}
	_, _, err = Open(context.Background(), "idemtest-down://u:S3cretPw@h")
	if !errors.Is(err, storage.ErrStoreUnavailable) || strings.Contains(err.Error(), "S3cretPw") || errors.Unwrap(errors.Unwrap(err)) != nil {
		t.Errorf("an opener's error that repeats the password: %v; want it scrubbed, still ErrStoreUnavailable, wrapping nothing that prints it", err)
	}
	for _, bad := range []string{"idemtest-ok", "Upper", "a:b", ""} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", bad)
				}
			}()
			Register(bad, func(context.Context, *url.URL, Options) (storage.Store, func() error, error) { return nil, nil, nil })
		}()
	}
}
