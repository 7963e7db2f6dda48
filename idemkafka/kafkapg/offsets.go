package kafkapg

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/idemkafka/kafkapg/offsetstable"
	"github.com/idemgo/idem/internal/pgsql"
	"github.com/idemgo/idem/pgstore"
)

// DefaultOffsetsTable is the offsets table used when [WithOffsetsTable] is
// not given.
const DefaultOffsetsTable = offsetstable.Default

//go:embed queries.sql
var queriesSQL string

var sqlTemplates = pgsql.Parse("queries.sql", queriesSQL)

// offsetsTable is a validated offsets table name and its statements.
type offsetsTable struct {
	ident  string
	store  string // $1 group, $2 topic, $3 partition, $4 next offset, $5 leader epoch
	load   string // $1 group, $2 topics
	stored string // $1 group, $2 topic, $3 partition
}

// parseOffsetsTable parses name ("" for [DefaultOffsetsTable]) as every
// table name of idem's PostgreSQL packages is parsed (see
// [WithOffsetsTable]), and renders the table's statements (queries.sql).
func parseOffsetsTable(name string) (offsetsTable, error) {
	p, err := pgsql.ParseTableOr(name, DefaultOffsetsTable)
	if err != nil {
		return offsetsTable{}, err
	}
	t := offsetsTable{ident: p.Ident()}
	r := func(def string) string { return pgsql.Render("kafkapg", sqlTemplates, def, t.vars()) }
	t.store, t.load, t.stored = r("store"), r("load"), r("stored")
	return t, nil
}

// vars are what queries.sql is rendered with.
func (t offsetsTable) vars() map[string]string { return map[string]string{"table": t.ident} }

// Migrate creates or upgrades the offsets table named table ("" for
// [DefaultOffsetsTable]; schema.table accepted, the schema must exist):
// one row per consumer group, topic and partition, holding the next offset
// to consume. It is idempotent, and safe when several processes run it at
// once: its statements run as one transaction holding an advisory lock for
// the table. The records table is pgstore's: create it with
// pgstore.Migrate (idem migrate creates both). It is [offsetstable.Migrate],
// which a program that migrates tables and consumes nothing imports
// instead, to link no Kafka client.
func Migrate(ctx context.Context, db pgstore.DB, table string) error {
	return offsetstable.Migrate(ctx, db, table)
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
			c.c.Logger().InfoContext(ctx, "kafkapg: partition starts at its stored offset",
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
	err = db.QueryRow(ctx, t.stored, group, topic, partition).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		return -1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("kafkapg: StoredOffset: %w", err)
	}
	return next, nil
}
