package store_test

import (
	"context"
	"testing"

	"github.com/queen-go/queen/queen/store"
)

// TestDeletedPartitionsTakeTheirMessages holds the cascade migration 022
// moved from the messages' foreign key to a statement trigger on
// partitions: a partition deleted by itself, and every partition of a
// deleted queue, leave no message behind, and the stored counts of what
// remains still agree with the rows.
func TestDeletedPartitionsTakeTheirMessages(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	var items []store.PushItem
	for _, q := range []string{"cascade-a", "cascade-b"} {
		for _, p := range []string{"x", "y"} {
			for _, tx := range []string{"1", "2", "3"} {
				items = append(items, store.PushItem{Queue: q, Partition: p, TransactionID: tx})
			}
		}
	}
	if _, err := pushItems(ctx, s, tenant, items, ""); err != nil {
		t.Fatal(err)
	}
	var pids []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(p.id::text) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.tenant_id = $1 AND q.name IN ('cascade-a', 'cascade-b')`, tenant).Scan(&pids); err != nil || len(pids) != 4 {
		t.Fatalf("partitions: %v %v", pids, err)
	}
	left := func(when string, want int) {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.messages WHERE partition_id = ANY($1::uuid[])`, pids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("%s: %d messages of the test's partitions stored, want %d", when, n, want)
		}
		var orphans int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.messages m WHERE m.partition_id = ANY($1::uuid[])
			AND NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = m.partition_id)`, pids).Scan(&orphans); err != nil || orphans != 0 {
			t.Fatalf("%s: %d messages outlived their partition (%v)", when, orphans, err)
		}
		storedCountsAgree(t, pool, when)
	}
	left("after the push", 12)
	if _, err := pool.Exec(ctx, `DELETE FROM queen.partitions p USING queen.queues q
		WHERE q.id = p.queue_id AND q.tenant_id = $1 AND q.name = 'cascade-a' AND p.name = 'x'`, tenant); err != nil {
		t.Fatal(err)
	}
	left("after deleting a partition", 9)
	if ok, err := s.DeleteQueue(ctx, tenant, "cascade-b"); err != nil || !ok {
		t.Fatalf("delete queue: %v %v", ok, err)
	}
	left("after deleting a queue", 3)
}
