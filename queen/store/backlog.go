package store

import "context"

// Backlog is a queue's depth per partition for one consumer group, or for
// the queue as a whole (Group ""), read from sequence arithmetic only: no
// message is scanned, so a poller can read it on any backlog.
type Backlog struct {
	Queue, Group string
	Partitions   []PartitionBacklog // by name
}

// PartitionBacklog is one partition's depth. Pending counts messages past
// the cursor; Processing, those under a live lease; Ready, the rest.
type PartitionBacklog struct {
	Partition                  string
	Pending, Processing, Ready int64
}

// backlogSQL reads tenant $1's queue $2's depth per partition at $4, for
// group $3 (” = the queue as a whole, where the slowest named group sets
// the cursor and queue mode counts only when no named group has one, and
// every live lease is processing). Pending runs from the cursor, or from
// just before the oldest retained message when retention deleted past it,
// to the partition's last seq; a group without a cursor row owes all of
// it. Processing is capped at pending. No queue: no rows at all.
const backlogSQL = `
WITH q AS (SELECT id, name FROM queen.queues WHERE tenant_id = $1 AND name = $2),
c AS (
	SELECT p.id, p.name, p.last_seq,
		(SELECT m.seq - 1 FROM queen.messages m WHERE m.partition_id = p.id ORDER BY m.seq LIMIT 1) AS floor,
		CASE WHEN $3 = '' THEN
			coalesce(min(pc.last_consumed_seq) FILTER (WHERE pc.consumer_group <> '__QUEUE_MODE__'),
				min(pc.last_consumed_seq) FILTER (WHERE pc.consumer_group = '__QUEUE_MODE__'))
		ELSE min(pc.last_consumed_seq) FILTER (WHERE pc.consumer_group = $3) END AS cursor,
		coalesce(sum(greatest(pc.lease_max_seq - pc.last_consumed_seq, 0))
			FILTER (WHERE pc.lease_expires_at > coalesce($4::timestamptz, now()) AND ($3 = '' OR pc.consumer_group = $3)), 0) AS leased
	FROM q JOIN queen.partitions p ON p.queue_id = q.id
	LEFT JOIN queen.partition_consumers pc ON pc.partition_id = p.id
	GROUP BY p.id, p.name, p.last_seq
),
d AS (SELECT name, greatest(last_seq - greatest(coalesce(cursor, 0), coalesce(floor, last_seq)), 0)::bigint AS pending, leased FROM c)
SELECT q.name, d.name, coalesce(d.pending, 0), coalesce(least(d.pending, d.leased), 0)::bigint,
	coalesce(d.pending - least(d.pending, d.leased), 0)::bigint
FROM q LEFT JOIN d ON true
ORDER BY d.name`

// Backlog reads the queue's depth for group ("" for the queue as a
// whole). An unknown queue is ErrNotFound.
func (s *Store) Backlog(ctx context.Context, tenant, queue, group string) (Backlog, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	b := Backlog{Queue: queue, Group: group}
	rows, err := s.pool.Query(ctx, backlogSQL, tenant, queue, group, s.dbNow())
	if err != nil {
		return b, err
	}
	found := false
	for rows.Next() {
		var name *string
		var pb PartitionBacklog
		if err := rows.Scan(&b.Queue, &name, &pb.Pending, &pb.Processing, &pb.Ready); err != nil {
			rows.Close()
			return b, err
		}
		found = true
		if name != nil {
			pb.Partition = *name
			b.Partitions = append(b.Partitions, pb)
		}
	}
	if err := rows.Err(); err != nil {
		return b, err
	}
	if !found {
		return b, ErrNotFound
	}
	return b, nil
}
