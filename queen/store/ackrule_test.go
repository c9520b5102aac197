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
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// The ack lease rule is stated once, queen.ack_verdict, and the combined
// completions statement answers as its old text did (kept in
// ackref_test.go). Random cursor rows (storetest.DrawCursors: lease live,
// expired or absent, held by one token or another, covering fewer or more
// seqs, the cursor before or past the messages, no row at all) meet random
// batches of distinct completions (the right, a wrong or no lease id,
// unknown messages, another tenant's queue), each run through the old
// statement and the new, each in its own transaction from the same rows,
// rolled back: the answers, the cursor rows and the DLQ rows must be the
// same, with and without ignore_lease. The general ack, whose state machine
// is queen/consume's, is held to its old code there
// (TestAckMatchesTheOldTwoRules).
func TestAckCompletedMatchesTheOldRule(t *testing.T) {
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
		if _, err := pushItems(ctx, s, q.tenant, items, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE queen.queues SET retry_limit = 1 WHERE name = 'rule'`); err != nil {
		t.Fatal(err)
	}
	pids := storetest.AckPartitionIDs(t, pool)
	rapid.Check(t, func(rt *rapid.T) {
		state := storetest.DrawCursors(rt, pids, now)
		checkCompletions(rt, pool, state, distinctAcks(storetest.DrawAcks(rt, pids)), now)
	})
}

// checkCompletions runs distinct completions through the old combined
// statement and the new, from the same cursor rows, with and without
// ignore_lease, and fails rt unless they did the same.
func checkCompletions(rt *rapid.T, pool *pgxpool.Pool, state []storetest.CursorRow, items []store.AckItem, now time.Time) {
	ignore := rapid.Bool().Draw(rt, "ignoreLease")
	var p, x, l, g, tn []string
	for _, it := range items {
		p, x, l = append(p, it.PartitionID), append(x, it.TransactionID), append(l, it.LeaseID)
		g, tn = append(g, "g"), append(tn, tenant)
	}
	run := func(sql string, args ...any) storetest.AckOutcome {
		return storetest.RolledBack(rt, pool, state, func(tx pgx.Tx) (any, error) {
			return storetest.CollectRows(context.Background(), tx, sql, args...)
		})
	}
	// The old statement took ignore_lease as $7; the new one has it false,
	// and true only as the ack-ignores-lease canary rewrites it.
	sql := store.AckCompletedSQL
	if ignore {
		sql = store.AckCompletedIgnoringLeaseSQL
	}
	if old, cur := run(store.RefAckCompletedSQL, p, x, l, g, tn, now, ignore, nil), run(sql, p, x, l, g, tn, now, nil, nil); !reflect.DeepEqual(old, cur) {
		rt.Fatalf("combined completions (ignoreLease=%v) of %+v\nold: %+v\nnew: %+v", ignore, items, old, cur)
	}
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

// queen.ack_verdict is inlined into both ack statements, so stating the
// rule once costs nothing: the plan holds the rule's CASE, not a call.
// (A STRICT, plpgsql or SET-clause function would be called per row.)
func TestAckVerdictIsInlined(t *testing.T) {
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "inline", TransactionID: "a"}}, ""); err != nil {
		t.Fatal(err)
	}
	res, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "inline", Batch: 1})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("pop: %v %+v", err, res)
	}
	m := res.Messages[0]
	for name, q := range map[string][]any{
		"ackCompletedSQL": {store.AckCompletedSQL, []string{m.PartitionID}, []string{m.TransactionID}, []string{m.LeaseID},
			[]string{store.QueueModeGroup}, []string{tenant}, nil, nil, nil},
		"ackReadSQL": {store.AckReadSQL, []string{m.PartitionID}, []string{m.TransactionID}, store.QueueModeGroup, tenant,
			nil, []string{m.LeaseID}, nil},
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
