package outbox

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// row is a pending message read by fetch.
type row struct {
	id  int64
	msg Message
	err error // the headers column could not be decoded
}

// fetch writes the pending marks and reads the next batch in one round
// trip.
func (s *session) fetch(ctx context.Context) ([]row, error) {
	m := s.r.takeMarks()
	rows, dead, err := s.read(ctx, m, nil)
	if err != nil {
		s.r.restoreMarks(m)
		return nil, err
	}
	s.observeDead(ctx, m, dead)
	return rows, nil
}

// read writes m and reads the first batch of pending rows but those of
// inFlight (being published, not marked yet), in one round trip: the
// statements run as one implicit transaction, in order. It touches nothing
// of the session but its connection (and woken, which the connection
// sets), so it may run beside a Publish.
//
// Every read starts from the first pending row. A row can become visible
// after rows with higher ids were read, its transaction having drawn its
// id first and committed last; a read that started after the rows it had
// read (a cursor) would pass it by and publish the next message of its
// key first.
func (s *session) read(ctx context.Context, m marks, inFlight []int64) (rows []row, dead int, err error) {
	r := s.r
	b := &pgx.Batch{}
	kill := m.queue(b, r.q)
	skip := pgtype.FlatArray[int64](inFlight)
	if skip == nil {
		skip = pgtype.FlatArray[int64]{} // not NULL: id <> ALL(NULL) holds for no row
	}
	if len(s.held) == r.cfg.Partitions {
		b.Queue(r.q.fetchAll, skip, r.cfg.BatchSize)
	} else {
		parts := make([]int64, len(s.held))
		for i, p := range s.held {
			parts[i] = int64(p)
		}
		b.Queue(r.q.fetch, skip, int64(r.cfg.Partitions), parts, r.cfg.BatchSize)
	}
	s.woken = false
	br := s.conn.SendBatch(ctx, b)
	rows, dead, err = readRows(br, b.Len()-1, kill, r.cfg.BatchSize)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, dbError("fetch", err)
	}
	return rows, dead, nil
}

// readRows reads the results of marks statements, the kill-th of which
// moved rows to the dead rows (-1: none), then the rows of the fetch after
// them, at most batch. It returns how many rows died. It allocates little
// per row: the rows are a message's worth of garbage for every message
// published.
func readRows(br pgx.BatchResults, marks, kill, batch int) (_ []row, dead int, _ error) {
	for i := range marks {
		tag, err := br.Exec()
		if err != nil {
			return nil, 0, err
		}
		if i == kill {
			dead = int(tag.RowsAffected())
		}
	}
	rs, err := br.Query()
	if err != nil {
		return nil, 0, err
	}
	defer rs.Close()
	var rows []row // nil when none: no batch read ahead
	var (
		id           int64
		msgID        string
		key, headers []byte
		payload      []byte
		createdAt    time.Time
		dest         string // the last destination, shared by the rows that have it
	)
	for rs.Next() {
		// A batch's rows mostly go to a few destinations: one string
		// for each run of them. Text is the same bytes in either format.
		if raw := rs.RawValues(); len(raw) > 2 && string(raw[2]) != dest {
			dest = string(raw[2])
		}
		// pgx copies a bytea into a new slice: the message keeps payload.
		if err := rs.Scan(&id, &msgID, nil, &key, &headers, &payload, &createdAt); err != nil {
			return nil, 0, err
		}
		rw := row{id: id, msg: Message{ID: msgID, Destination: dest, Key: string(key), Payload: payload, CreatedAt: createdAt}}
		rw.msg.Headers, rw.err = DecodeHeaders(headers)
		if rows == nil {
			rows = make([]row, 0, batch)
		}
		rows = append(rows, rw)
	}
	return rows, dead, rs.Err()
}
