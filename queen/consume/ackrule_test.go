package consume_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// The ack lease rule is stated once, queen.ack_verdict, and the general
// ack answers as the Go statement of it did before (the old code is kept in
// ackref_test.go; the combined completions statement is held to its old
// text in queen/store, TestAckCompletedMatchesTheOldRule). Random cursor
// rows (storetest.DrawCursors: lease live, expired or absent, held by one
// token or another, covering fewer or more seqs, the cursor before or past
// the messages, retries left or not, no row at all) meet random batches
// (every status, the right, a wrong or no lease id, repeated items, unknown
// messages, another tenant's queue, strict or not). Each batch runs
// through the old code and the new, each in its own transaction from the
// same rows, rolled back: the answers, the error, the cursor rows and the
// DLQ rows must be the same. Run under -tags canary with
// QUEEN_CANARY=ack-ignores-lease or failed-ack-completes, it holds the
// planted bugs to their old effect too.
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
		// Through a push path, as the broker pushes (store.Push is the
		// store tests' own).
		if err := pushpath.New(pushpath.Options{Store: s, Retry: storetest.Retry(s)}).Replay(ctx, q.tenant, items); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE queen.queues SET retry_limit = 1 WHERE name = 'rule'`); err != nil {
		t.Fatal(err)
	}
	pids := storetest.AckPartitionIDs(t, pool)
	rapid.Check(t, func(rt *rapid.T) {
		state := storetest.DrawCursors(rt, pids, now)
		// Several batches meet each drawn state: the rows are the
		// costly draw, and a batch is cheap.
		for range 4 {
			checkGeneralAck(rt, s, pool, state, storetest.DrawAcks(rt, pids), now)
		}
	})
}

// checkGeneralAck runs items through the old ackTx and the new, from the
// same cursor rows, and fails rt unless they did the same.
func checkGeneralAck(rt *rapid.T, s *store.Store, pool *pgxpool.Pool, state []storetest.CursorRow, items []store.AckItem, now time.Time) {
	ctx := context.Background()
	strict := rapid.IntRange(0, 3).Draw(rt, "strict") == 0
	run := func(ack func(context.Context, pgx.Tx, string, string, []store.AckItem, bool) ([]store.AckResult, error)) storetest.AckOutcome {
		return storetest.RolledBack(rt, pool, state, func(tx pgx.Tx) (any, error) { return ack(ctx, tx, tenant, "g", items, strict) })
	}
	old := func(ctx context.Context, tx pgx.Tx, tn, g string, items []store.AckItem, strict bool) ([]store.AckResult, error) {
		return consume.RefAckTx(ctx, s, &now, tx, tn, g, items, strict)
	}
	cur := func(ctx context.Context, tx pgx.Tx, tn, g string, items []store.AckItem, strict bool) ([]store.AckResult, error) {
		return consume.AckTx(ctx, s, tx, tn, g, items, strict)
	}
	if o, c := run(old), run(cur); !reflect.DeepEqual(o, c) {
		rt.Fatalf("general ack (strict=%v) of %+v\nold: %+v\nnew: %+v", strict, items, o, c)
	}
}
