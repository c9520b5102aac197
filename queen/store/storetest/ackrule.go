package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/queen-go/queen/queen/store"
)

// The draws and the rolled-back runs of the ack rule's property tests:
// queen/store holds its completions statement to the old one, queen/consume
// its general ack state machine to the old one, each from the same drawn
// cursor rows. Both push five messages (m0..m4) to partitions p0 and p1 of
// queue "rule" (retry limit 1) and to p0 of "rule-other" of another tenant.

// AckPartitions are the partitions the property tests ack in: the tenant's
// two, another tenant's, and one that does not exist.
type AckPartitions struct {
	Own              [2]string
	Foreign, Missing string
}

// AckPartitionIDs reads the partitions of queues "rule" and "rule-other".
func AckPartitionIDs(t *testing.T, pool *pgxpool.Pool) AckPartitions {
	t.Helper()
	var p AckPartitions
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT p.id::text FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'rule' AND p.name = 'p0'),
		(SELECT p.id::text FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'rule' AND p.name = 'p1'),
		(SELECT p.id::text FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'rule-other')`).
		Scan(&p.Own[0], &p.Own[1], &p.Foreign)
	if err != nil {
		t.Fatal(err)
	}
	p.Missing = "00000000-0000-4000-8000-00000000dead"
	return p
}

// CursorRow is one drawn partition_consumers row of group g; absent rows
// are not inserted.
type CursorRow struct {
	pid                  string
	seq, leaseMax        int64
	worker               *string
	expires              *time.Time
	acked, retries       int
	absent               bool
	consumed, batchCount int64
}

// DrawCursors draws group g's cursor rows in the tenant's two partitions.
func DrawCursors(rt *rapid.T, p AckPartitions, now time.Time) []CursorRow {
	var rows []CursorRow
	for i, pid := range p.Own {
		r := CursorRow{pid: pid, absent: rapid.IntRange(0, 9).Draw(rt, fmt.Sprintf("absent%d", i)) == 0}
		r.seq = rapid.SampledFrom([]int64{0, 0, 1, 2, 3, 5}).Draw(rt, fmt.Sprintf("seq%d", i))
		r.leaseMax = rapid.SampledFrom([]int64{5, 5, 6, 3, 0}).Draw(rt, fmt.Sprintf("leaseMax%d", i))
		if w := rapid.SampledFrom([]string{"L1", "L1", "L1", "L2", ""}).Draw(rt, fmt.Sprintf("worker%d", i)); w != "" {
			r.worker = &w
		}
		if d := rapid.SampledFrom([]int{60, 60, 60, 0, -60, -1}).Draw(rt, fmt.Sprintf("expires%d", i)); d != -1 {
			e := now.Add(time.Duration(d) * time.Second)
			r.expires = &e
		}
		r.acked = rapid.IntRange(0, 3).Draw(rt, fmt.Sprintf("acked%d", i))
		r.retries = rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("retries%d", i))
		r.consumed, r.batchCount = 7, 3
		rows = append(rows, r)
	}
	return rows
}

// DrawAcks draws a batch of one to eight acks: every status, the right, a
// wrong or no lease id, repeated items, unknown messages, another
// tenant's partition and one that does not exist.
func DrawAcks(rt *rapid.T, p AckPartitions) []store.AckItem {
	pids := []string{p.Own[0], p.Own[0], p.Own[0], p.Own[1], p.Own[1], p.Own[1], p.Foreign, p.Missing}
	items := make([]store.AckItem, rapid.IntRange(1, 8).Draw(rt, "items"))
	for i := range items {
		items[i] = store.AckItem{
			PartitionID:   rapid.SampledFrom(pids).Draw(rt, "partition"),
			TransactionID: rapid.SampledFrom([]string{"m0", "m1", "m2", "m3", "m4", "m0", "m1", "m2", "m3", "m4", "missing"}).Draw(rt, "txid"),
			Status:        rapid.SampledFrom([]string{"completed", "", "success", "failed", "retry", "dlq", "nonsense"}).Draw(rt, "status"),
			LeaseID:       rapid.SampledFrom([]string{"", "L1", "L1", "L2"}).Draw(rt, "lease"),
			Error:         rapid.SampledFrom([]string{"", "boom"}).Draw(rt, "error"),
		}
	}
	return items
}

// AckOutcome is what one ack did: its answer, its error, and the rows it
// left.
type AckOutcome struct {
	Answer        any
	Err           string
	Cursors, Dead []string
}

// RolledBack writes state, runs ack and reads the cursor and DLQ rows, in
// one transaction it rolls back.
func RolledBack(rt *rapid.T, pool *pgxpool.Pool, state []CursorRow, ack func(pgx.Tx) (any, error)) AckOutcome {
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		rt.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `DELETE FROM queen.partition_consumers WHERE consumer_group = 'g'`); err != nil {
		rt.Fatal(err)
	}
	for _, r := range state {
		if r.absent {
			continue
		}
		_, err := tx.Exec(ctx, `INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group,
			last_consumed_seq, lease_max_seq, worker_id, lease_expires_at, acked_count, batch_retry_count,
			total_messages_consumed, total_batches_consumed, created_at)
			SELECT p.id, p.queue_id, 'g', $2, $3, $4, $5, $6, $7, $8, $9, '2000-01-01Z' FROM queen.partitions p WHERE p.id = $1`,
			r.pid, r.seq, r.leaseMax, r.worker, r.expires, r.acked, r.retries, r.consumed, r.batchCount)
		if err != nil {
			rt.Fatal(err)
		}
	}
	var o AckOutcome
	o.Answer, err = ack(tx)
	if err != nil {
		o.Err = err.Error()
		return o
	}
	if o.Cursors, err = CollectRows(ctx, tx, `SELECT row_to_json(pc)::text FROM queen.partition_consumers pc
		WHERE consumer_group = 'g' ORDER BY partition_id`); err != nil {
		rt.Fatal(err)
	}
	if o.Dead, err = CollectRows(ctx, tx, `SELECT row_to_json(d)::text FROM (SELECT message_id, partition_id, consumer_group,
		error_message, retry_count, original_created_at, failed_at FROM queen.dead_letter_queue ORDER BY message_id) d`); err != nil {
		rt.Fatal(err)
	}
	return o
}

// CollectRows is every row of a query, each as the text of its columns.
func CollectRows(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]string, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprint(v...))
	}
	return out, rows.Err()
}
