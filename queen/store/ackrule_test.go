package store_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// The ack lease rule is stated once, queen.ack_verdict, and both ack paths
// answer as the two statements of it did before (the old code is kept in
// ackref_test.go). Random cursor rows (lease live, expired or absent, held
// by one token or another, covering fewer or more seqs, the cursor before
// or past the messages, retries left or not, no row at all) meet random
// batches (every status, the right, a wrong or no lease id, repeated
// items, unknown messages, another tenant's queue, strict or not). Each
// batch runs through the old code and the new, each in its own transaction
// from the same rows, rolled back: the answers, the error, the cursor rows
// and the DLQ rows must be the same. The combined completions statement is
// held to its old text the same way, with and without ignore_lease. Run
// under -tags canary with QUEEN_CANARY=ack-ignores-lease or
// failed-ack-completes, it holds the planted bugs to their old effect too.
func TestAckMatchesTheOldTwoRules(t *testing.T) {
	ctx := context.Background()
	pool := storetest.Pool(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil), DBNow: func() *time.Time { v := now; return &v }})
	const other = "00000000-0000-0000-0000-0000000000aa"
	for _, q := range []struct{ tenant, queue, partition string }{
		{tenant, "rule", "p0"}, {tenant, "rule", "p1"}, {other, "rule-other", "p0"},
	} {
		var items []store.PushItem
		for i := 0; i < 5; i++ {
			items = append(items, store.PushItem{Queue: q.queue, Partition: q.partition, TransactionID: fmt.Sprintf("m%d", i)})
		}
		if _, err := s.Push(ctx, q.tenant, items, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE queen.queues SET retry_limit = 1 WHERE name = 'rule'`); err != nil {
		t.Fatal(err)
	}
	pids := partitionIDs(t, pool)
	rapid.Check(t, func(rt *rapid.T) {
		state := drawCursors(rt, pids, now)
		// Several batches meet each drawn state: the rows are the
		// costly draw, and a batch is cheap.
		for range 4 {
			checkGeneralAck(rt, s, pool, state, drawAcks(rt, pids))
		}
		checkCompletions(rt, pool, state, distinctAcks(drawAcks(rt, pids)), now)
	})
}

// checkGeneralAck runs items through the old ackTx and the new, from the
// same cursor rows, and fails rt unless they did the same.
func checkGeneralAck(rt *rapid.T, s *store.Store, pool *pgxpool.Pool, state []cursorRow, items []store.AckItem) {
	ctx := context.Background()
	strict := rapid.IntRange(0, 3).Draw(rt, "strict") == 0
	run := func(ack func(context.Context, pgx.Tx, string, string, []store.AckItem, bool) ([]store.AckResult, error)) ackOutcome {
		return rolledBack(rt, pool, state, func(tx pgx.Tx) (any, error) { return ack(ctx, tx, tenant, "g", items, strict) })
	}
	if old, cur := run(s.RefAckTx), run(s.AckTx); !reflect.DeepEqual(old, cur) {
		rt.Fatalf("general ack (strict=%v) of %+v\nold: %+v\nnew: %+v", strict, items, old, cur)
	}
}

// checkCompletions runs distinct completions through the old combined
// statement and the new, from the same cursor rows, with and without
// ignore_lease, and fails rt unless they did the same.
func checkCompletions(rt *rapid.T, pool *pgxpool.Pool, state []cursorRow, items []store.AckItem, now time.Time) {
	ignore := rapid.Bool().Draw(rt, "ignoreLease")
	var p, x, l, g, tn []string
	for _, it := range items {
		p, x, l = append(p, it.PartitionID), append(x, it.TransactionID), append(l, it.LeaseID)
		g, tn = append(g, "g"), append(tn, tenant)
	}
	run := func(sql string, args ...any) ackOutcome {
		return rolledBack(rt, pool, state, func(tx pgx.Tx) (any, error) {
			return collectRows(context.Background(), tx, sql, args...)
		})
	}
	// The old statement took ignore_lease as $7; the new one has it false,
	// and true only as the ack-ignores-lease canary rewrites it.
	sql := store.AckCompletedSQL
	if ignore {
		sql = store.AckCompletedIgnoringLeaseSQL
	}
	if old, cur := run(store.RefAckCompletedSQL, p, x, l, g, tn, now, ignore, nil), run(sql, p, x, l, g, tn, now, nil); !reflect.DeepEqual(old, cur) {
		rt.Fatalf("combined completions (ignoreLease=%v) of %+v\nold: %+v\nnew: %+v", ignore, items, old, cur)
	}
}

// ackPartitions are the partitions the property test acks in: its
// tenant's two, another tenant's, and one that does not exist.
type ackPartitions struct {
	own              [2]string
	foreign, missing string
}

func partitionIDs(t *testing.T, pool *pgxpool.Pool) ackPartitions {
	t.Helper()
	var p ackPartitions
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT p.id::text FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'rule' AND p.name = 'p0'),
		(SELECT p.id::text FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'rule' AND p.name = 'p1'),
		(SELECT p.id::text FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'rule-other')`).
		Scan(&p.own[0], &p.own[1], &p.foreign)
	if err != nil {
		t.Fatal(err)
	}
	p.missing = "00000000-0000-4000-8000-00000000dead"
	return p
}

// cursorRow is one drawn partition_consumers row of group g; absent rows
// are not inserted.
type cursorRow struct {
	pid                  string
	seq, leaseMax        int64
	worker               *string
	expires              *time.Time
	acked, retries       int
	absent               bool
	consumed, batchCount int64
}

func drawCursors(rt *rapid.T, p ackPartitions, now time.Time) []cursorRow {
	var rows []cursorRow
	for i, pid := range p.own {
		r := cursorRow{pid: pid, absent: rapid.IntRange(0, 9).Draw(rt, fmt.Sprintf("absent%d", i)) == 0}
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

func drawAcks(rt *rapid.T, p ackPartitions) []store.AckItem {
	pids := []string{p.own[0], p.own[0], p.own[0], p.own[1], p.own[1], p.own[1], p.foreign, p.missing}
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

// distinctAcks is items without repeats of a (partition, transactionId),
// as the combined statement requires.
func distinctAcks(items []store.AckItem) []store.AckItem {
	seen := map[[2]string]bool{}
	var out []store.AckItem
	for _, it := range items {
		k := [2]string{it.PartitionID, it.TransactionID}
		if !seen[k] {
			seen[k] = true
			out = append(out, it)
		}
	}
	return out
}

// ackOutcome is what one ack did: its answer, its error, and the rows it
// left.
type ackOutcome struct {
	Answer        any
	Err           string
	Cursors, Dead []string
}

// rolledBack writes state, runs ack and reads the cursor and DLQ rows, in
// one transaction it rolls back.
func rolledBack(rt *rapid.T, pool *pgxpool.Pool, state []cursorRow, ack func(pgx.Tx) (any, error)) ackOutcome {
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
	var o ackOutcome
	o.Answer, err = ack(tx)
	if err != nil {
		o.Err = err.Error()
		return o
	}
	if o.Cursors, err = collectRows(ctx, tx, `SELECT row_to_json(pc)::text FROM queen.partition_consumers pc
		WHERE consumer_group = 'g' ORDER BY partition_id`); err != nil {
		rt.Fatal(err)
	}
	if o.Dead, err = collectRows(ctx, tx, `SELECT row_to_json(d)::text FROM (SELECT message_id, partition_id, consumer_group,
		error_message, retry_count, original_created_at, failed_at FROM queen.dead_letter_queue ORDER BY message_id) d`); err != nil {
		rt.Fatal(err)
	}
	return o
}

// collectRows is every row of a query, each as the text of its columns.
func collectRows(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]string, error) {
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

// queen.ack_verdict is inlined into both ack statements, so stating the
// rule once costs nothing: the plan holds the rule's CASE, not a call.
// (A STRICT, plpgsql or SET-clause function would be called per row.)
func TestAckVerdictIsInlined(t *testing.T) {
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	if _, err := s.Push(ctx, tenant, []store.PushItem{{Queue: "inline", TransactionID: "a"}}, ""); err != nil {
		t.Fatal(err)
	}
	res, err := claim(ctx, s, store.PopRequest{Tenant: tenant, Queue: "inline", Batch: 1})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("pop: %v %+v", err, res)
	}
	m := res.Messages[0]
	for name, q := range map[string][]any{
		"ackCompletedSQL": {store.AckCompletedSQL, []string{m.PartitionID}, []string{m.TransactionID}, []string{m.LeaseID},
			[]string{store.QueueModeGroup}, []string{tenant}, nil, nil},
		"ackReadSQL": {store.AckReadSQL, []string{m.PartitionID}, []string{m.TransactionID}, store.QueueModeGroup, tenant,
			nil, []string{m.LeaseID}},
	} {
		plan, err := pool.Query(ctx, "EXPLAIN (VERBOSE) "+q[0].(string), q[1:]...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(plan, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(lines, "\n")
		if strings.Contains(text, "ack_verdict") || !strings.Contains(text, "'committed'::text") {
			t.Errorf("%s: queen.ack_verdict is not inlined:\n%s", name, text)
		}
	}
}
