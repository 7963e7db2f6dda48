package cassandrastore

import (
	"context"
	"strings"

	"github.com/idemgo/idem/storage"
)

var _ storage.Scanner = (*Store)(nil)

// scanPageSize is how many rows a page of Scan holds.
const scanPageSize = 500

// Scan implements [storage.Scanner] with a SELECT of the whole table,
// page by page, at Config.Consistency, keeping the live records whose
// store key starts with prefix. Partitions are placed by their key's
// hash, so a Scan of one namespace reads every record of the table, on
// every node: for the operator's tools, never a request's path. It reads
// without Paxos (a range cannot be read at SERIAL): a conditional write
// still in flight may be seen as before it. A record whose outcome is
// longer than MaxValueSize is skipped.
func (s *Store) Scan(ctx context.Context, prefix string, fn func(storage.Record) bool) error {
	iter := s.sess.Query(s.scan).Consistency(s.cfg.Consistency).PageSize(scanPageSize).Idempotent(true).IterContext(ctx)
	c := s.clock()
	for {
		m := make(map[string]any, 9)
		if !iter.MapScan(m) {
			break
		}
		k, _ := m[ColKey].([]byte)
		if !strings.HasPrefix(string(k), prefix) {
			continue
		}
		r, err := scanRow(m)
		if err != nil || r.absent() || r.expiresAt < c.dead || r.status != statusInProgress && len(r.result) > s.cfg.MaxValueSize {
			continue // not a record of this package's, expired, or too large to hand out
		}
		if !fn(r.record(string(k))) {
			iter.Close()
			return nil
		}
	}
	if err := iter.Close(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.translate("Scan", err)
	}
	return nil
}
