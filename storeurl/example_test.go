package storeurl_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storeurl"
)

// A Guard over the store a URL names: mem:// needs nothing installed.
func ExampleOpen() {
	ctx := context.Background()
	store, closeStore, err := storeurl.Open(ctx, "mem://")
	if err != nil {
		log.Fatal(err)
	}
	defer closeStore()
	g, err := idem.New(store, idem.Config{Namespace: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	for range 2 {
		res, err := g.Do(ctx, "order-7", nil, func(context.Context) ([]byte, error) { return []byte("charged"), nil })
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (replayed: %v)\n", res.Value, res.Replayed)
	}
	// Output:
	// charged (replayed: false)
	// charged (replayed: true)
}

// A SQLite file: the file and its table are created when missing, and a
// second Open of the same URL, as a restarted process would, finds the
// records.
func ExampleOpen_sqlite() {
	dir, err := os.MkdirTemp("", "storeurl-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	raw := "sqlite://" + filepath.Join(dir, "idem.db") + "?table=orders_idem"
	ctx := context.Background()
	for range 2 {
		store, closeStore, err := storeurl.Open(ctx, raw) // sqliteurl is imported by this file's package
		if err != nil {
			log.Fatal(err)
		}
		g, err := idem.New(store, idem.Config{Namespace: "orders"})
		if err != nil {
			log.Fatal(err)
		}
		res, err := g.Do(ctx, "order-7", nil, func(context.Context) ([]byte, error) { return []byte("charged"), nil })
		g.Close()
		closeStore()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (replayed: %v)\n", res.Value, res.Replayed)
	}
	// Output:
	// charged (replayed: false)
	// charged (replayed: true)
}

// PostgreSQL, its records table created or upgraded on the way, as a
// service does at start-up. The program imports
// github.com/idemgo/idem/storeurl/pgurl for the scheme.
func ExampleMigrate() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, closeStore, err := storeurl.Open(ctx, os.Getenv("IDEM_STORE_URL"), storeurl.Migrate())
	if err != nil {
		log.Fatal(err)
	}
	defer closeStore()
	_ = store // idem.New(store, …)
}

// A URL with a mistake: the error names it without its password.
func ExampleURLError() {
	_, _, err := storeurl.Open(context.Background(), "redis://:S3cr%t@cache.internal:6379/0")
	fmt.Println(err)
	if ue, ok := errors.AsType[*storeurl.URLError](err); ok {
		fmt.Println("fix the URL", ue.URL)
	}
	// Output:
	// storeurl: redis://:xxxxx@cache.internal:6379/0: not a URL: a malformed %-escape
	// fix the URL redis://:xxxxx@cache.internal:6379/0
}

func ExampleRedact() {
	fmt.Println(storeurl.Redact("postgres://app:S3cret@db.internal/orders?sslmode=require&sslpassword=K3y"))
	// Output:
	// postgres://app:xxxxx@db.internal/orders?sslmode=require&sslpassword=xxxxx
}
