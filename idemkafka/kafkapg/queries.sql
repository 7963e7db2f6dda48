-- Every SQL statement kafkapg sends about offsets, but the migrations
-- (migrations/*.sql), as text/template definitions rendered once per table
-- by New (and by StoredOffset for its table). {{.table}} is the offsets
-- table, a validated, quoted identifier; the values go in $n parameters.

-- $1 group, $2 topic, $3 partition, $4 next offset, $5 leader epoch. The
-- offset only moves forward: a member that lost the partition and commits
-- late cannot move it back under the new owner.
{{define "store"}}INSERT INTO {{.table}} AS o (consumer_group, topic, partition, next_offset, leader_epoch)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (consumer_group, topic, partition) DO UPDATE
SET next_offset = EXCLUDED.next_offset, leader_epoch = EXCLUDED.leader_epoch, updated_at = now()
WHERE o.next_offset < EXCLUDED.next_offset{{end}}

-- $1 group, $2 topics: the stored offsets of a newly assigned member.
{{define "load"}}SELECT topic, partition, next_offset FROM {{.table}} WHERE consumer_group = $1 AND topic = ANY($2){{end}}

-- $1 group, $2 topic, $3 partition.
{{define "stored"}}SELECT next_offset FROM {{.table}} WHERE consumer_group = $1 AND topic = $2 AND partition = $3{{end}}
