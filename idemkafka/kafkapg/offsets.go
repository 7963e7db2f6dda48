package kafkapg

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/pgstore"
)

// DefaultOffsetsTable is the offsets table used when [WithOffsetsTable] is
// not given.
const DefaultOffsetsTable = "idem_kafka_offsets"

// offsetsTable is a validated offsets table name and its statements.
type offsetsTable struct {
	name   string
	ident  string
	create string
	store  string // $1 group, $2 topic, $3 partition, $4 next offset, $5 leader epoch
	load   string // $1 group, $2 topics
}

// parseOffsetsTable validates name as pgstore validates its table's: one
// or two dot-separated parts of lowercase ASCII letters, digits and
// underscores, not starting with a digit, at most 48 bytes each.
func parseOffsetsTable(name string) (offsetsTable, error) {
	if name == "" {
		name = DefaultOffsetsTable
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return offsetsTable{}, fmt.Errorf("table %q: at most one dot (schema.table)", name)
	}
	for _, p := range parts {
		ok := p != "" && len(p) <= 48 && !(p[0] >= '0' && p[0] <= '9')
		for _, r := range p {
			ok = ok && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
		}
		if !ok {
			return offsetsTable{}, fmt.Errorf("table %q: each part lowercase letters, digits and underscores, not starting with a digit, 1 to 48 bytes", name)
		}
	}
	t := offsetsTable{name: name, ident: pgx.Identifier(parts).Sanitize()}
	t.create = `CREATE TABLE IF NOT EXISTS ` + t.ident + ` (
		consumer_group text    NOT NULL,
		topic          text    NOT NULL,
		partition      integer NOT NULL,
		next_offset    bigint  NOT NULL,
		leader_epoch   integer NOT NULL,
		updated_at     timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (consumer_group, topic, partition)
	)`
	// The offset only moves forward: a member that lost the partition and
	// commits late cannot move it back under the new owner.
	t.store = `INSERT INTO ` + t.ident + ` AS o (consumer_group, topic, partition, next_offset, leader_epoch)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (consumer_group, topic, partition) DO UPDATE
		SET next_offset = EXCLUDED.next_offset, leader_epoch = EXCLUDED.leader_epoch, updated_at = now()
		WHERE o.next_offset < EXCLUDED.next_offset`
	t.load = `SELECT topic, partition, next_offset FROM ` + t.ident + ` WHERE consumer_group = $1 AND topic = ANY($2)`
	return t, nil
}

// Migrate creates the offsets table named table ("" for
// [DefaultOffsetsTable]; schema.table accepted, the schema must exist):
// one row per consumer group, topic and partition, holding the next offset
// to consume. It is idempotent. The records table is pgstore's: create it
// with pgstore.Migrate.
func Migrate(ctx context.Context, db pgstore.DB, table string) error {
	t, err := parseOffsetsTable(table)
	if err != nil {
		return fmt.Errorf("kafkapg: Migrate: %w", err)
	}
	if _, err := db.Exec(ctx, t.create); err != nil {
		return fmt.Errorf("kafkapg: Migrate %s: %w", t.name, err)
	}
	return nil
}

// adjust starts each newly assigned partition at the offset stored in
// PostgreSQL, when there is one; the others start where Kafka says.
func (c *Consumer) adjust(ctx context.Context, cl *kgo.Client, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	topics := make([]string, 0, len(offsets))
	for t := range offsets {
		topics = append(topics, t)
	}
	rows, err := c.db.Query(ctx, c.offsets.load, group, topics)
	if err != nil {
		return nil, fmt.Errorf("kafkapg: loading the stored offsets of group %s: %w", group, err)
	}
	defer rows.Close()
	for rows.Next() {
		var topic string
		var partition int32
		var next int64
		if err := rows.Scan(&topic, &partition, &next); err != nil {
			return nil, fmt.Errorf("kafkapg: loading the stored offsets: %w", err)
		}
		if _, assigned := offsets[topic][partition]; assigned {
			offsets[topic][partition] = kgo.NewOffset().At(next).WithEpoch(-1)
			c.c.Options().Logger().InfoContext(ctx, "kafkapg: partition starts at its stored offset",
				"group", group, "topic", topic, "partition", partition, "offset", next)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("kafkapg: loading the stored offsets: %w", err)
	}
	return offsets, nil
}

// storeOffset queues the upsert of a partition's next offset after r.
func (c *Consumer) storeOffset(b *pgx.Batch, group string, r *kgo.Record) {
	b.Queue(c.offsets.store, group, r.Topic, r.Partition, r.Offset+1, r.LeaderEpoch)
}

// StoredOffset returns the next offset of the group's partition stored in
// table ("" for [DefaultOffsetsTable]), or -1 when none is stored: for
// tooling and tests.
func StoredOffset(ctx context.Context, db pgstore.DB, table, group, topic string, partition int32) (int64, error) {
	t, err := parseOffsetsTable(table)
	if err != nil {
		return 0, fmt.Errorf("kafkapg: StoredOffset: %w", err)
	}
	var next int64
	err = db.QueryRow(ctx, `SELECT next_offset FROM `+t.ident+` WHERE consumer_group = $1 AND topic = $2 AND partition = $3`,
		group, topic, partition).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		return -1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("kafkapg: StoredOffset: %w", err)
	}
	return next, nil
}
