package queen_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// An ack of a partition seen before goes to its queue's shard without
// asking the others: with s0's partitions table locked (a slow or stuck
// shard), an ack of a queue on s1 answers at once. Asking every shard per
// ack request, it waited on s0 for the statement timeout (30 s), and cost
// a statement per shard per ack.
func TestShardsAckOfASeenPartitionAsksOnlyItsShard(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	b := start(t, sh.config(t, "queue:b-*=s1"))
	base := "http://" + b.Addr()
	for n := range 2 {
		if code, body := post(t, base+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":"b-acks","partition":"p1","payload":%d}]}`, n)); code != 201 {
			t.Fatalf("push: %d %s", code, body)
		}
	}
	ack := func(pid, txid, lease string) (int, string) {
		return post(t, base+"/api/v1/ack", fmt.Sprintf(`{"partitionId":%q,"transactionId":%q,"leaseId":%q,"status":"completed"}`, pid, txid, lease))
	}
	if code, body := ack(popLeased(t, base, "b-acks")); code != 200 || !strings.Contains(body, `"success":true`) {
		t.Fatalf("first ack: %d %s", code, body)
	}
	pid, txid, lease := popLeased(t, base, "b-acks")

	ctx := context.Background()
	conn := dbConn(t, sh.s0)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE queen.partitions IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		code, body := ack(pid, txid, lease)
		done <- fmt.Sprintf("%d %s", code, body)
	}()
	// Until the ack answers, no statement of the ack route may wait on
	// s0's lock (the broker's own background passes may: their text
	// differs).
	watch := dbConn(t, sh.s0)
	defer watch.Close(ctx)
	deadline := time.After(20 * time.Second)
	for {
		select {
		case got := <-done:
			if !strings.HasPrefix(got, "200") || !strings.Contains(got, `"success":true`) {
				t.Errorf("second ack: %s", got)
			}
			shutdown(t, b)
			return
		case <-deadline:
			t.Fatalf("the ack of a queue on s1 did not answer while s0's partitions table was locked")
		case <-time.After(20 * time.Millisecond):
		}
		var waiting int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND query LIKE '%SELECT q.name, '''', p.id::text FROM queen.partitions%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			t.Fatalf("the ack of a queue on s1 asked s0, which does not hold its partition (it waits on s0's lock)")
		}
	}
}
