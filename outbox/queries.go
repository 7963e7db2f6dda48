package outbox

import (
	"strconv"
	"time"
)

// relayQueries are a Relay's statements, rendered from queries.sql for its
// table and configuration; each is described there, under its name.
type relayQueries struct {
	listen, fetch, fetchAll, mark, kill, recordFailures, cleanup, lag string
	join, members, release, acquire                                   string
	// memberID is the second key of the lock every relay of the table
	// holds shared while it runs: -Partitions, so relays with different
	// partition counts see each other (partition locks use 0…n-1).
	memberID int32
}

func newRelayQueries(t table, cfg RelayConfig) relayQueries {
	backoff := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'g', -1, 64) }
	fetch := []string{"max_batch_bytes", itoa(cfg.MaxBatchBytes)}
	q := relayQueries{
		listen:   t.render("listen"),
		fetchAll: t.render("fetch_all", fetch...),
		fetch:    t.render("fetch", fetch...),
		mark:     t.render("mark"),
		kill:     t.render("kill", "max_attempts", itoa(cfg.MaxAttempts)),
		recordFailures: t.render("record_failures",
			"min_backoff", backoff(cfg.MinBackoff), "max_backoff", backoff(cfg.MaxBackoff)),
		cleanup: t.render("cleanup",
			"retention_us", itoa(cfg.Retention.Microseconds()), "cleanup_batch", itoa(cleanupBatch)),
		lag:      t.render("lag"),
		join:     t.render("join"),
		members:  t.render("members"),
		release:  t.render("release"),
		acquire:  t.render("acquire"),
		memberID: int32(-cfg.Partitions),
	}
	if cfg.DeleteSent {
		q.mark = t.render("mark_delete")
	}
	return q
}
