package store

import (
	"context"
	"sync"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// Consumer watermarks (contract-admin.md 7.4): queen.consumer_watermarks
// notes, per (tenant, queue name, group), when a wildcard pop last found the queue
// fully consumed. Tools and Queen's test suites read the table; this
// broker writes it and never filters pops on it, and deletes the rows that
// a seek to a timestamp, a group delete, a subscription change or a queue
// delete make stale.

// watermarkEvery is how seldom one (queue, group) is checked: at most once
// per 30 s per broker, and the statement skips rows younger than that.
const watermarkEvery = 30 * time.Second

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

// watermarkThrottle remembers when this broker last checked each key and
// found its row there (written or confirmed), so a busy long poll does not
// run the check on every empty pass. A check that left no row (messages
// were still pending, say leased) does not arm it: the next empty pop,
// once they are acked, writes the row at once. Entries older
// than watermarkEvery are dropped when the map grows, so names only polled
// do not accumulate.
type watermarkThrottle struct {
	clock clock.Clock
	mu    sync.Mutex
	last  map[[3]string]time.Time
}

func (w *watermarkThrottle) due(tenant, queue, group string) bool {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [3]string{tenant, queue, group}
	at, ok := w.last[k]
	return !ok || now.Sub(at) >= watermarkEvery
}

// arm starts the quiet period of a key whose row was written or confirmed.
func (w *watermarkThrottle) arm(tenant, queue, group string) {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.last) >= 4096 {
		for k2, at := range w.last {
			if now.Sub(at) >= watermarkEvery {
				delete(w.last, k2)
			}
		}
	}
	w.last[[3]string{tenant, queue, group}] = now
}

// forget lets the next empty pop of (queue, group) check at once, after
// its row was deleted.
func (w *watermarkThrottle) forget(tenant, queue, group string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.last {
		if k[0] == tenant && (queue == "" || k[1] == queue) && (group == "" || k[2] == group) {
			delete(w.last, k)
		}
	}
}

// noteEmptyScan writes the watermark after a wildcard pop found nothing.
// It is bookkeeping: a failure is the caller's to log, never the pop's.
func (s *Store) noteEmptyScan(ctx context.Context, tenant, queue, group string) error {
	if !s.marks.due(tenant, queue, group) {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var row bool
	if err := s.pool.QueryRow(ctx, watermarkSQL, queue, group, tenant, s.dbNow()).Scan(&row); err != nil {
		return err
	}
	if row {
		s.marks.arm(tenant, queue, group)
	}
	return nil
}
