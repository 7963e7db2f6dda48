package pgstore

import (
	_ "embed"
	"strconv"
	"text/template"

	"github.com/idemgo/idem/internal/pgsql"
)

// queriesSQL holds every statement pgstore sends, but the migrations: see
// its header for how it is written.
//
//go:embed queries.sql
var queriesSQL string

// sqlTemplates are the definitions of queries.sql. The migrations are
// rendered the same way (see Migrate).
var sqlTemplates = pgsql.Parse("queries.sql", queriesSQL)

// noOutcomeRow starts the error of TxGuard's outcome statement when it
// matched no row (see tx_outcome in queries.sql).
const noOutcomeRow = "pgstore: the outcome matched no record"

// vars are what every definition of queries.sql and every migration is
// rendered with.
func (t table) vars() map[string]string {
	return map[string]string{"table": t.ident, "index": t.index, "seq": t.seq, "no_outcome_row": noOutcomeRow}
}

// render returns the definition name of tmpl rendered for t, with the
// arguments kv (see pgsql.Args).
func (t table) render(tmpl *template.Template, name string, kv ...string) string {
	return pgsql.Render("pgstore", tmpl, name, t.vars(), kv...)
}

// queries are the statements of a Store and a TxGuard over a table,
// rendered from queries.sql; each is described there, under its name.
type queries struct {
	claimPeek, claimRead, claim, claimBatch     string
	finish, release, extend, completeBatch      string
	get, delete, deleteIf, reap, scan           string
	txClaimRead, txClaim, txComplete, txFail    string
	savepointClaim, releaseClaim, rollbackClaim string
	savepointFn, rollbackFn, commit             string
	savepointBatch, releaseBatch, rollbackBatch string
	restoreLockTimeout                          string
}

func newQueries(t table) queries {
	r := func(name string) string { return t.render(sqlTemplates, name) }
	return queries{
		claimPeek:      t.claimPeek(DefaultMaxValueSize),
		claimRead:      r("claim_read"),
		claim:          r("claim"),
		claimBatch:     r("claim_batch"),
		finish:         r("finish"),
		release:        r("release"),
		extend:         r("extend"),
		completeBatch:  r("complete_batch"),
		get:            r("get"),
		delete:         r("delete"),
		deleteIf:       r("delete_if"),
		scan:           r("scan"),
		reap:           r("reap"),
		txClaimRead:    r("tx_claim_read"),
		txClaim:        r("tx_claim"),
		txComplete:     r("tx_complete"),
		txFail:         r("tx_fail"),
		savepointClaim: r("savepoint_claim"),
		releaseClaim:   r("release_claim"),
		rollbackClaim:  r("rollback_claim"),
		savepointFn:    r("savepoint_fn"),
		rollbackFn:     r("rollback_fn"),
		commit:         r("commit"),

		savepointBatch:     r("savepoint_batch"),
		releaseBatch:       r("release_batch"),
		rollbackBatch:      r("rollback_batch"),
		restoreLockTimeout: r("restore_lock_timeout_stmt"),
	}
}

// setLockTimeout is the statement that sets a TxGuard's lock timeout of ms
// milliseconds for its claim, and begin the BEGIN that carries it (see
// set_lock_timeout and begin in queries.sql).
func (t table) setLockTimeout(ms int64) (set, begin string) {
	arg := strconv.FormatInt(ms, 10)
	return t.render(sqlTemplates, "set_lock_timeout", "lock_timeout_ms", arg),
		t.render(sqlTemplates, "begin", "lock_timeout_ms", arg)
}

// claimPeek returns the peek of a Store whose Config.MaxValueSize is limit
// (claim_peek in queries.sql).
func (t table) claimPeek(limit int) string {
	return t.render(sqlTemplates, "claim_peek", "limit", strconv.Itoa(limit))
}
