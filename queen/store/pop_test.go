package store_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// A pop of one partition runs popOneSQL, which numbers, groups and sorts
// nothing; it must answer exactly what the general popSQL answers for the
// same claim. Before every pop of a random history (pushes, delays and
// windows, leases that expire, autoAck, acks, messages deleted as retention
// would) both statements run on the same state, each in a transaction
// rolled back, and must return the same rows and leave the same cursor
// row.
func TestOnePartitionPopAgreesWithTheGeneralPop(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	now := time.Now().UTC()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil),
		DBNow: func() *time.Time { v := now; return &v }})
	ctx := context.Background()
	run, delivered := 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		queue := fmt.Sprintf("agree-%d", run)
		if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: queue, Patch: store.OptionPatch{
			DelayedProcessing: intp(rapid.SampledFrom([]int{0, 30}).Draw(rt, "delay")),
			WindowBuffer:      intp(rapid.SampledFrom([]int{0, 20}).Draw(rt, "window")),
			LeaseTime:         intp(rapid.SampledFrom([]int{10, 60}).Draw(rt, "lease")),
		}}); err != nil {
			rt.Fatal(err)
		}
		var popped []consume.PopResult
		seq := 0
		for step := rapid.IntRange(5, 40).Draw(rt, "steps"); step > 0; step-- {
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 0, 1:
				part := fmt.Sprintf("p%d", rapid.IntRange(0, 2).Draw(rt, "partition"))
				for n := rapid.IntRange(1, 3).Draw(rt, "messages"); n > 0; n-- {
					seq++
					if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: queue, Partition: part,
						TransactionID: fmt.Sprintf("t%d", seq)}}, ""); err != nil {
						rt.Fatal(err)
					}
				}
			case 2:
				now = now.Add(time.Duration(rapid.IntRange(1, 40).Draw(rt, "seconds")) * time.Second)
			case 3:
				req := consume.PopRequest{Tenant: tenant, Queue: queue, Partitions: 1,
					Batch: rapid.IntRange(1, 4).Draw(rt, "batch"),
					// A budget of a message, of two, or none (each null
					// payload costs 8: "null" as data and as payload).
					MaxBytes: rapid.SampledFrom([]int64{8, 16, 20, math.MaxInt64}).Draw(rt, "maxBytes"),
					AutoAck:  rapid.Bool().Draw(rt, "autoAck"),
					Group:    rapid.SampledFrom([]string{"", "g"}).Draw(rt, "group")}
				if rapid.Bool().Draw(rt, "specific") {
					req.Partition = fmt.Sprintf("p%d", rapid.IntRange(0, 2).Draw(rt, "popPartition"))
				}
				delivered += comparePops(rt, pool, queue, req, now)
				if req.Partition == "" && !req.AutoAck {
					comparePopMany(rt, pool, queue, req, now, rapid.IntRange(2, 4).Draw(rt, "pops"))
				}
				res, err := claim(ctx, s, req)
				if err != nil {
					rt.Fatal(err)
				}
				popped = append(popped, res)
			case 4:
				if len(popped) > 0 {
					res := popped[rapid.IntRange(0, len(popped)-1).Draw(rt, "ack")]
					items := make([]store.AckItem, len(res.Messages))
					for i, m := range res.Messages {
						items[i] = store.AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: res.LeaseID}
					}
					if _, err := s.Ack(ctx, tenant, res.Group, items); err != nil {
						rt.Fatal(err)
					}
				}
			case 5:
				// A message deleted under the cursor's feet, as retention does.
				if _, err := pool.Exec(ctx, `DELETE FROM queen.messages WHERE id = (
					SELECT m.id FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
					JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY m.seq LIMIT 1)`, queue); err != nil {
					rt.Fatal(err)
				}
			}
		}
	})
	if delivered == 0 {
		t.Fatal("no comparison delivered a message: the property compared nothing")
	}
}

// comparePops runs the lean and the general statement for req on the same
// state, each in a transaction rolled back, fails when they differ, and
// returns how many messages the lean one delivered.
func comparePops(rt *rapid.T, pool *pgxpool.Pool, queue string, req consume.PopRequest, now time.Time) int {
	qid, group := queueAndGroup(rt, pool, queue, req)
	args := []any{qid, group, 1, req.Batch, "00000000-0000-7000-8000-0000000000aa", 0, req.AutoAck, now, req.MaxBytes, nil}
	if req.Partition != "" {
		args = append(args, req.Partition)
	}
	one, general := store.PopStatements(req.Partition != "")
	leanRows, leanCursors := popRolledBack(rt, pool, one, args)
	generalRows, generalCursors := popRolledBack(rt, pool, general, args)
	if !reflect.DeepEqual(leanRows, generalRows) {
		rt.Fatalf("pop %+v: the one-partition statement answered\n%v\nthe general one\n%v", req, leanRows, generalRows)
	}
	if !reflect.DeepEqual(leanCursors, generalCursors) {
		rt.Fatalf("pop %+v: the one-partition statement left cursors\n%v\nthe general one\n%v", req, leanCursors, generalCursors)
	}
	return len(leanRows)
}

// comparePopMany runs n one-partition wildcard pops for req as one
// combined statement (popManySQL) and as n one-partition statements one
// after the other in one transaction, each rolled back, and fails unless
// the k-th partition the combined one claimed, its rows and its lease
// under the k-th token, are what the k-th single pop claimed, and every
// cursor row is left alike. (AutoAck pops are not compared: a single pop
// after an autoAck one may claim that partition's next batch, where one
// combined scan claims each partition once.)
func comparePopMany(rt *rapid.T, pool *pgxpool.Pool, queue string, req consume.PopRequest, now time.Time, n int) {
	ctx := context.Background()
	qid, group := queueAndGroup(rt, pool, queue, req)
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("00000000-0000-7000-8000-0000000000%02d", i+1)
	}
	manyRows, manyCursors := popRolledBack(rt, pool, store.PopManySQL(), []any{qid, group, n, req.Batch, tokens, 0, false, now, req.MaxBytes, nil})
	one, _ := store.PopStatements(false)
	tx, err := pool.Begin(ctx)
	if err != nil {
		rt.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var singleRows []string
	claims := 0
	for _, tok := range tokens {
		rows := collect(rt, tx, one, qid, group, 1, req.Batch, tok, 0, false, now, req.MaxBytes, nil)
		if len(rows) > 0 {
			claims++
		}
		for _, r := range rows {
			singleRows = append(singleRows, fmt.Sprint(r, " ", claims))
		}
	}
	singleCursors := collect(rt, tx, `SELECT partition_id, consumer_group, last_consumed_seq, last_consumed_id, last_consumed_created_at,
		lease_acquired_at, lease_expires_at, worker_id, batch_size, acked_count, lease_max_seq, batch_retry_count,
		total_messages_consumed, total_batches_consumed, last_consumed_at
		FROM queen.partition_consumers WHERE queue_id = $1 ORDER BY partition_id, consumer_group`, qid)
	if !reflect.DeepEqual(manyRows, singleRows) {
		rt.Fatalf("%d pops %+v: the combined statement answered\n%v\nthe single ones, in turn\n%v", n, req, manyRows, singleRows)
	}
	if !reflect.DeepEqual(manyCursors, singleCursors) {
		rt.Fatalf("%d pops %+v: the combined statement left cursors\n%v\nthe single ones\n%v", n, req, manyCursors, singleCursors)
	}
}

// queueAndGroup are req's queue id and consumer group as a pop statement
// takes them.
func queueAndGroup(rt *rapid.T, pool *pgxpool.Pool, queue string, req consume.PopRequest) (qid, group string) {
	if err := pool.QueryRow(context.Background(), `SELECT id::text FROM queen.queues WHERE tenant_id = $1 AND name = $2`,
		tenant, queue).Scan(&qid); err != nil {
		rt.Fatal(err)
	}
	group = req.Group
	if group == "" {
		group = store.QueueModeGroup
	}
	return qid, group
}

// popRolledBack runs a pop statement in a transaction it rolls back and
// returns its rows and every cursor row of the queue as it left them.
func popRolledBack(rt *rapid.T, pool *pgxpool.Pool, sql string, args []any) (rows, cursors []string) {
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		rt.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows = collect(rt, tx, sql, args...)
	cursors = collect(rt, tx, `SELECT partition_id, consumer_group, last_consumed_seq, last_consumed_id, last_consumed_created_at,
		lease_acquired_at, lease_expires_at, worker_id, batch_size, acked_count, lease_max_seq, batch_retry_count,
		total_messages_consumed, total_batches_consumed, last_consumed_at
		FROM queen.partition_consumers WHERE queue_id = $1 ORDER BY partition_id, consumer_group`, args[0])
	return rows, cursors
}

// collect renders every row of a query.
func collect(rt *rapid.T, tx pgx.Tx, sql string, args ...any) []string {
	res, err := tx.Query(context.Background(), sql, args...)
	if err != nil {
		rt.Fatal(err)
	}
	defer res.Close()
	var out []string
	for res.Next() {
		v, err := res.Values()
		if err != nil {
			rt.Fatal(err)
		}
		out = append(out, fmt.Sprint(v...))
	}
	if err := res.Err(); err != nil {
		rt.Fatal(err)
	}
	return out
}

// A wildcard pop of two partitions stops at its byte budget across them:
// it gets a prefix of each partition in claim order, at least one
// message, and what it did not get is neither leased nor consumed: the
// next pops get exactly the rest, in order. Each payload "aaaa" costs 12
// bytes (its text, 6 bytes, written twice).
func TestPopByteBudgetSpansPartitionsAndLeavesTheRest(t *testing.T) {
	t.Parallel()
	s, _ := newStoreWithPool(t)
	ctx := context.Background()
	for _, part := range []string{"p0", "p1"} {
		for i := 0; i < 2; i++ {
			if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "budget", Partition: part,
				TransactionID: fmt.Sprintf("%s-%d", part, i), Payload: crypt.Plain([]byte(`"aaaa"`))}}, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string][]string{}
	take := func(res consume.PopResult) {
		for _, m := range res.Messages {
			got[m.Partition] = append(got[m.Partition], m.TransactionID)
		}
	}
	// autoAck, a budget below one message: the first message alone.
	res, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "budget", Partitions: 2, Batch: 10, AutoAck: true, MaxBytes: 5})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("autoAck pop under a tiny budget: %v, %d messages", err, len(res.Messages))
	}
	take(res)
	// Leased, a budget of two messages: two, across whatever it claimed.
	res, err = claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "budget", Partitions: 2, Batch: 10, MaxBytes: 24})
	if err != nil || len(res.Messages) != 2 {
		t.Fatalf("pop with a budget of two messages: %v, %d messages", err, len(res.Messages))
	}
	take(res)
	items := make([]store.AckItem, len(res.Messages))
	for i, m := range res.Messages {
		items[i] = store.AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: res.LeaseID}
	}
	if out, err := s.Ack(ctx, tenant, "", items); err != nil || !out[0].Success || !out[len(out)-1].Success {
		t.Fatalf("ack: %v %+v", err, out)
	}
	res, err = claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "budget", Partitions: 2, Batch: 10, AutoAck: true})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("the pop after the budgeted ones: %v, %d messages, want the one left", err, len(res.Messages))
	}
	take(res)
	for _, part := range []string{"p0", "p1"} {
		if want := []string{part + "-0", part + "-1"}; !reflect.DeepEqual(got[part], want) {
			t.Fatalf("partition %s delivered %v, want %v (all: %v)", part, got[part], want, got)
		}
	}
}
