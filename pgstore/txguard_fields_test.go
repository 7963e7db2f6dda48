package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/txguard/txguardtest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
)

// A TxGuard refuses, at construction, every field of the idem.Config it
// cannot honour, naming it; so does an SQLTxGuard.
func TestTxGuardRefusesTheFieldsItCannotHonour(t *testing.T) {
	t.Parallel()
	txguardtest.Refuses(t, "pgstore", func(cfg idem.Config) error {
		_, err := pgstore.NewTxGuard(nil, cfg, pgstore.TxConfig{})
		return err
	})
	txguardtest.Refuses(t, "pgstore", func(cfg idem.Config) error {
		_, err := pgstore.NewSQLTxGuard(nil, cfg, pgstore.TxConfig{})
		return err
	})
	g, err := pgstore.NewTxGuard(nil, idem.Config{Namespace: "n", Retention: time.Hour, StoreTimeout: time.Second}, pgstore.TxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := g.Config()
	if cfg.Namespace != "n" || cfg.Retention != time.Hour || cfg.FailedRetention != time.Hour || cfg.StoreTimeout != time.Second ||
		cfg.Lease != 0 || cfg.CacheTTL != 0 || cfg.MaxKeyLen != idem.DefaultMaxKeyLen || cfg.Fingerprint == nil {
		t.Errorf("Config() = %+v: want the Guard's defaults, and the refused fields zero", cfg)
	}
	if txc := g.TxConfig(); txc.Table != pgstore.DefaultTable || txc.LockTimeout != pgstore.DefaultLockTimeout {
		t.Errorf("TxConfig() = %+v, want the defaults", txc)
	}
}

// Namespace and Fingerprint mean what they mean for a Guard: the TxGuard's
// record is the Guard's of the same namespace and key, and payloads are
// told apart by the Fingerprint given.
func TestTxGuardNamespaceAndFingerprint(t *testing.T) {
	t.Parallel()
	byLength := func(dst, payload []byte) []byte { return fmt.Appendf(dst, "%d", len(payload)) }
	e := newTxEnv(t, 4, txConf{Config: idem.Config{Fingerprint: byLength}})
	ctx := testCtx(t)
	if _, err := e.g.Do(ctx, "fp", []byte("abc"), e.pay("fp")); err != nil {
		t.Fatal(err)
	}
	rec, err := e.store.Get(ctx, storage.StoreKey("payments", "fp"))
	if err != nil || string(rec.Fingerprint) != "3" {
		t.Fatalf("the record in namespace payments: %+v, %v; want fingerprint 3", rec, err)
	}
	res, err := e.g.Do(ctx, "fp", []byte("xyz"), e.pay("fp"))
	if err != nil || !res.Replayed {
		t.Errorf("another payload of the same fingerprint: %+v, %v; want a replay", res, err)
	}
	if _, err := e.g.Do(ctx, "fp", []byte("abcd"), e.pay("fp")); !errors.Is(err, storage.ErrKeyReused) {
		t.Errorf("a payload of another fingerprint: %v, want ErrKeyReused", err)
	}
	guard, err := idem.New(e.store, idem.Config{Namespace: "payments", Fingerprint: byLength})
	if err != nil {
		t.Fatal(err)
	}
	defer guard.Close()
	ran := false
	if res, err := guard.Do(ctx, "fp", []byte("abc"), func(context.Context) ([]byte, error) { ran = true; return nil, nil }); err != nil || !res.Replayed || ran {
		t.Errorf("a Guard of the same namespace: %+v, %v; want the TxGuard's outcome replayed", res, err)
	}
}
