package outbox

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
)

// The relays of a table share its partitions with session-level advisory
// locks, two int4 keys each: the table's lock class (a hash of its name)
// and the partition, 0 to Partitions-1. A relay also holds the lock
// (class, -Partitions) shared for as long as its session lives: counting
// its holders in pg_locks counts the relays. Locks end with the session,
// so a relay that dies, is killed or loses its connection frees its
// partitions the moment PostgreSQL sees the session end.

// rebalance counts the table's relays and takes or gives up partitions so
// that this relay holds its share, ceil(Partitions / relays): together the
// relays' shares cover every partition. What the relay published is marked
// first, so that a partition it gives up is not published again by the
// next holder.
func (s *session) rebalance(ctx context.Context) (changed bool, err error) {
	r := s.r
	if err := s.flush(ctx); err != nil {
		return false, err
	}
	var (
		members int
		top     int64
		class   = int64(uint32(r.t.lockClass))
		mine    = int64(uint32(r.q.memberID))
	)
	if err := s.conn.QueryRow(ctx, r.q.members, class, mine).Scan(&members, &top); err != nil {
		return false, dbError("rebalance", err)
	}
	members = max(members, 1)
	want := (r.cfg.Partitions + members - 1) / members
	// Relays that disagree on the partition count would publish a key
	// from two partitions at once: only those with the smallest count run.
	yield := top != mine
	if yield {
		if !s.yielding {
			r.cfg.Logger.WarnContext(ctx, "outbox: a relay of this table runs with fewer RelayConfig.Partitions; holding no partition until it stops",
				slog.String("table", r.t.name), slog.Int("partitions", r.cfg.Partitions), slog.Int64("theirs", 1<<32-top))
		}
		want = 0
	}
	s.yielding = yield
	before := slices.Clone(s.held)
	if len(s.held) > want {
		// Give up the last ones: a relay's share stays mostly the same
		// from one rebalance to the next.
		drop := s.held[want:]
		if _, err := s.conn.Exec(ctx, r.q.release, r.t.lockClass, toInt32s(drop)); err != nil {
			return false, dbError("rebalance", err)
		}
		s.held = s.held[:want]
	}
	if len(s.held) < want {
		candidates := make([]int32, 0, r.cfg.Partitions-len(s.held))
		start := rand.N(r.cfg.Partitions) // relays starting together try different partitions first
		for i := range r.cfg.Partitions {
			p := (start + i) % r.cfg.Partitions
			if _, mine := slices.BinarySearch(s.held, p); !mine {
				candidates = append(candidates, int32(p))
			}
		}
		rows, err := s.conn.Query(ctx, r.q.acquire, r.t.lockClass, candidates, want-len(s.held))
		if err != nil {
			return false, dbError("rebalance", err)
		}
		for rows.Next() {
			var p int32
			if err := rows.Scan(&p); err != nil {
				rows.Close()
				return false, dbError("rebalance", err)
			}
			s.held = append(s.held, int(p))
		}
		if err := rows.Err(); err != nil {
			return false, dbError("rebalance", err)
		}
		slices.Sort(s.held)
	}
	changed = !slices.Equal(before, s.held)
	if changed || members != s.members {
		s.members = members
		r.cfg.Logger.DebugContext(ctx, "outbox: relay partitions", slog.String("table", r.t.name),
			slog.Any("partitions", s.held), slog.Int("relays", members))
		r.observe(ctx, Event{Op: OpRebalance, Partitions: slices.Clone(s.held), Members: members})
	}
	return changed, nil
}

func toInt32s(ps []int) []int32 {
	out := make([]int32, len(ps))
	for i, p := range ps {
		out[i] = int32(p)
	}
	return out
}
