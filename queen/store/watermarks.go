package store

import (
	"context"
	"time"
)

// Consumer watermarks (contract-admin.md 7.4): queen.consumer_watermarks
// notes, per (tenant, queue name, group), when a wildcard pop last found the queue
// fully consumed. Tools and Queen's test suites read the table; this
// broker writes it and never filters pops on it, and deletes the rows that
// a seek to a timestamp, a group delete, a subscription change or a queue
// delete make stale (DeleteGroup, Seek to a timestamp, SetSubscription,
// DeleteQueue). How often a broker runs the statement is queen/consume's
// (its watermark throttle), and so is forgetting that throttle's entries
// after those deletes (consume.Consumer.ForgetWatermarks, called by the
// routes that run them).

// watermarkSQL runs after a wildcard pop of tenant $3's queue $1 by group
// $2 claimed nothing, at $4, and answers whether the row exists after it
// (written, bumped or fresh). A row younger than 30 s is left alone.
// Otherwise: no partition has messages past the group's cursor (leases
// ignored, a window buffer still closed counting as nothing pending) →
// both timestamps move to now, the row created if missing; something
// pending → only an existing row's updated_at moves.
const watermarkSQL = `
WITH fresh AS (
	SELECT 1 FROM queen.consumer_watermarks
	WHERE tenant_id = $3 AND queue_name = $1 AND consumer_group = $2 AND updated_at > coalesce($4::timestamptz, now()) - interval '30 seconds'
),
pending AS (
	SELECT EXISTS (
		SELECT 1 FROM queen.partitions p
		JOIN queen.queues q ON q.id = p.queue_id
		LEFT JOIN queen.partition_consumers pc ON pc.partition_id = p.id AND pc.consumer_group = $2
		WHERE q.tenant_id = $3 AND q.name = $1 AND p.last_seq > coalesce(pc.last_consumed_seq, 0)
			AND (q.window_buffer = 0 OR p.last_message_at <= coalesce($4::timestamptz, now()) - make_interval(secs => q.window_buffer))
	) AS found
	WHERE NOT EXISTS (SELECT 1 FROM fresh)
),
bumped AS (
	UPDATE queen.consumer_watermarks SET updated_at = coalesce($4::timestamptz, now())
	WHERE tenant_id = $3 AND queue_name = $1 AND consumer_group = $2 AND (SELECT found FROM pending)
	RETURNING 1
),
written AS (
	INSERT INTO queen.consumer_watermarks (tenant_id, queue_name, consumer_group, last_empty_scan_at, updated_at)
	SELECT $3, $1, $2, coalesce($4::timestamptz, now()), coalesce($4::timestamptz, now()) FROM pending WHERE NOT found
	ON CONFLICT (tenant_id, queue_name, consumer_group) DO UPDATE
	SET last_empty_scan_at = EXCLUDED.last_empty_scan_at, updated_at = EXCLUDED.updated_at
	RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM fresh) OR EXISTS (SELECT 1 FROM bumped) OR EXISTS (SELECT 1 FROM written)`

// WatermarkParams are watermarkSQL's arguments, $1 to $4.
type WatermarkParams struct {
	Queue, Group, Tenant string
	Now                  *time.Time
}

// WriteWatermark runs watermarkSQL after a wildcard pop found nothing, and
// answers whether the row exists after it (written, bumped or fresh). How
// often to run it is the caller's (queen/consume).
func (s *Store) WriteWatermark(ctx context.Context, p WatermarkParams) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var row bool
	err := s.pool.QueryRow(ctx, text("watermark"), argsOf(p)...).Scan(&row)
	return row, err
}
