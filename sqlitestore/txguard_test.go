package sqlitestore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/txguard/txguardtest"
	"github.com/idemgo/idem/sqlitestore"
)

// newTxGuard returns a TxGuard in namespace "payments" over a new Store,
// whose database has a ledger table, the business side effect of the
// transactional tests.
func newTxGuard(t *testing.T, scfg sqlitestore.Config, cfg idem.Config) (*sqlitestore.TxGuard, *sqlitestore.Store) {
	t.Helper()
	s, _ := newStore(t, scfg)
	if _, err := s.DB().ExecContext(testCtx(t), `CREATE TABLE ledger (id INTEGER PRIMARY KEY, key TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	cfg.Namespace = "payments"
	g, err := sqlitestore.NewTxGuard(s, cfg, sqlitestore.TxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return g, s
}

func TestTxGuard(t *testing.T) {
	t.Parallel()
	txguardtest.Run(t, func(t *testing.T) *txguardtest.Env {
		g, s := newTxGuard(t, sqlitestore.Config{BusyTimeout: 30 * time.Second}, idem.Config{})
		return &txguardtest.Env{
			DB: s.DB(), Store: s, Namespace: "payments", Records: s.Table(), Ledger: "ledger",
			Do: func(ctx context.Context, key string, payload []byte, fn func(context.Context, *sql.Tx) ([]byte, error)) (idem.Result, error) {
				return g.Do(ctx, key, payload, fn)
			},
			DoTx: func(ctx context.Context, tx *sql.Tx, key string, payload []byte, fn func(context.Context, *sql.Tx) ([]byte, error)) (idem.Result, error) {
				return g.DoTx(ctx, tx, key, payload, fn)
			},
		}
	})
}

// A TxGuard takes the Guard's idem.Config and refuses, at construction,
// every field it cannot honour, naming it, as pgstore's TxGuard does; the
// others are defaulted as a Guard's.
func TestTxGuardRefusesTheFieldsItCannotHonour(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, sqlitestore.Config{})
	txguardtest.Refuses(t, "sqlitestore", func(cfg idem.Config) error {
		_, err := sqlitestore.NewTxGuard(s, cfg, sqlitestore.TxConfig{})
		return err
	})
	if _, err := sqlitestore.NewTxGuard(s, idem.Config{Retention: -time.Second}, sqlitestore.TxConfig{}); err == nil ||
		!strings.Contains(err.Error(), "Retention") {
		t.Errorf("NewTxGuard with a negative Retention: %v, want an error naming it", err)
	}
	g, err := sqlitestore.NewTxGuard(s, idem.Config{Namespace: "n", Retention: time.Hour, StoreTimeout: time.Second}, sqlitestore.TxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := g.Config()
	if cfg.Namespace != "n" || cfg.Retention != time.Hour || cfg.StoreTimeout != time.Second ||
		cfg.Lease != 0 || cfg.CacheTTL != 0 || cfg.MaxKeyLen != idem.DefaultMaxKeyLen || cfg.Fingerprint == nil {
		t.Errorf("Config() = %+v: want the Guard's defaults, and the refused fields zero", cfg)
	}
}
