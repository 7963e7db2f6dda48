package sqlitestore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/txguard/txguardtest"
	"github.com/idemgo/idem/sqlitestore"
)

// newTxGuard returns a TxGuard in namespace "payments" over a new Store,
// whose database has a ledger table, the business side effect of the
// transactional tests.
func newTxGuard(t *testing.T, scfg sqlitestore.Config, cfg sqlitestore.TxConfig) (*sqlitestore.TxGuard, *sqlitestore.Store) {
	t.Helper()
	s, _ := newStore(t, scfg)
	if _, err := s.DB().ExecContext(testCtx(t), `CREATE TABLE ledger (id INTEGER PRIMARY KEY, key TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	cfg.Namespace = "payments"
	g, err := sqlitestore.NewTxGuard(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, s
}

func TestTxGuard(t *testing.T) {
	t.Parallel()
	txguardtest.Run(t, func(t *testing.T) *txguardtest.Env {
		g, s := newTxGuard(t, sqlitestore.Config{BusyTimeout: 30 * time.Second}, sqlitestore.TxConfig{})
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
