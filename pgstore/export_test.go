package pgstore

import (
	"reflect"
	"regexp"
	"slices"
	"time"

	"github.com/idemgo/idem/internal/pgsql"
)

// Statements returns every statement a Store, a TxGuard (with a lock
// timeout of 5s) and Migrate send for table, by the name of its
// definition in queries.sql.
func Statements(table string) (map[string]string, error) {
	t, err := parseTable(table)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	q := reflect.ValueOf(newQueries(t))
	for i := range q.NumField() {
		out["queries."+q.Type().Field(i).Name] = q.Field(i).String()
	}
	out["set_lock_timeout"], out["begin"] = t.setLockTimeout(5000)
	script, err := pgsql.MigrationScript("pgstore", migrations, "migrations/*.sql", t.lockKey, t.vars())
	if err != nil {
		return nil, err
	}
	out["migrate"] = script
	return out, nil
}

// UnusedDefinitions returns the definitions of queries.sql that neither
// the code renders (newQueries, setLockTimeout, Migrate) nor another
// definition includes.
func UnusedDefinitions() []string {
	rendered := []string{"claim_peek", "claim_read", "claim", "claim_batch", "finish", "release", "extend", "complete_batch",
		"get", "delete", "delete_if", "reap", "scan", "tx_claim_read", "tx_claim", "tx_complete", "tx_fail", "savepoint_claim",
		"release_claim", "rollback_claim", "savepoint_fn", "rollback_fn", "commit",
		"savepoint_batch", "release_batch", "rollback_batch", "restore_lock_timeout_stmt",
		"set_lock_timeout", "begin"}
	included := map[string]bool{}
	for _, m := range regexp.MustCompile(`\{\{-?\s*template "([^"]+)"`).FindAllStringSubmatch(queriesSQL, -1) {
		included[m[1]] = true
	}
	var unused []string
	for _, d := range sqlTemplates.Templates() {
		if name := d.Name(); name != sqlTemplates.Name() && !included[name] && !slices.Contains(rendered, name) {
			unused = append(unused, name)
		}
	}
	return unused
}

// SetReadFirstTries sets how many times a claim reads first before the
// full claim answers, until the test ends. Tests that call it must not run
// in parallel.
func SetReadFirstTries(tb interface{ Cleanup(func()) }, n int) {
	old := readFirstTries
	readFirstTries = n
	tb.Cleanup(func() { readFirstTries = old })
}

// SetClaimLease sets the lease of g's claims, which sets how much longer
// than its retention a completed record may be kept.
func SetClaimLease(g *TxGuard, d time.Duration) { g.x.ClaimLease = d }
