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

// partitionQueries returns the statements of the advisory locks: join
// takes the member lock; members counts the relays with the same partition
// count and returns the highest member key (that of the smallest count);
// release gives partitions up; acquire tries candidates in order until it
// holds enough.
func partitionQueries() (join, members, release, acquire string) {
	join = "SELECT pg_advisory_lock_shared($1::int4, $2::int4)"
	// pg_locks shows the two keys as oids: -n as 2^32-n. Partition keys are
	// below 2^31, member keys above.
	members = `SELECT count(DISTINCT pid) FILTER (WHERE objid::int8 = $2),
		coalesce(max(objid::int8) FILTER (WHERE objid::int8 >= 2147483648), $2)
		FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 2 AND granted AND classid::int8 = $1
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
	release = "SELECT bool_and(pg_advisory_unlock($1::int4, p)) FROM unnest($2::int4[]) AS p"
	// A Limit over a function scan pulls rows one at a time: the lock is
	// tried on candidates only until enough were taken.
	acquire = "SELECT p FROM unnest($2::int4[]) AS p WHERE pg_try_advisory_lock($1::int4, p) LIMIT $3"
	return join, members, release, acquire
}

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
