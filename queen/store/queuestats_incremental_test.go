package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// An incremental refresh counts only the queues changed since the last
// complete pass, and leaves the snapshot exactly what a full recount
// gives: after pushes, pops and acks, a group's deletion (which leaves no
// row version behind), and a lease that ends with time alone (which
// writes nothing). Not parallel: the horizon is the cluster's oldest
// running transaction, which other tests' transactions would hold back
// (more queues counted, never fewer, but the bound below would not hold).
// It fails with any source of changedQueuesSQL removed (each checked), or
// with the group delete's touch of the stats row removed.
func TestIncrementalQueueStatsCountOnlyChangedQueues(t *testing.T) {
	ctx := context.Background()
	pool := storetest.Pool(t)
	now := time.Now().UTC()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil), DBNow: func() *time.Time { at := now; return &at }})
	const queues = 40
	for i := range queues {
		push(t, s, fmt.Sprintf("qi-%02d", i), "p1", "a")
	}
	push(t, s, "qi-09", "p1", "b")
	deadLetter(t, s, "qi-11")
	var h store.StatsHorizon
	pass := func(what string, most int) {
		t.Helper()
		n, next, err := s.RefreshChangedQueueStats(ctx, h)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n > most {
			t.Fatalf("%s: counted %d queues, want at most %d", what, n, most)
		}
		t.Logf("%s: %d queues", what, n)
		h = next
		assertSnapshotIsLive(t, s, what)
	}
	pass("first (full) pass", queues)
	pass("second pass (every stats row just written)", queues)
	pass("third pass (nothing changed)", 3)

	push(t, s, "qi-07", "p1", "b")
	ackAll(t, s, "", popOne(t, s, consume.PopRequest{Queue: "qi-08", Batch: 1}))
	ackAll(t, s, "g", popOne(t, s, consume.PopRequest{Queue: "qi-09", Group: "g", Batch: 1}))
	popOne(t, s, consume.PopRequest{Queue: "qi-10", Batch: 1, LeaseSeconds: 30})
	pass("after a push, acks and a lease", 3+4)
	pass("settled", 3+1) // the lease of qi-10 is counted while it lives

	q := "qi-09"
	if _, _, err := namesOf(s).DeleteGroup(ctx, tenant, "g", &q, false); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute) // qi-10's lease ends, writing nothing
	// As retention deletes a dead letter and an unconsumed message: only
	// the trigger-kept counters change.
	for _, del := range []string{`DELETE FROM queen.dead_letter_queue`,
		`DELETE FROM queen.messages WHERE partition_id = (SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'qi-12')`} {
		if _, err := pool.Exec(ctx, del); err != nil {
			t.Fatal(err)
		}
	}
	pass("after a group delete, a lease's end and two deletes", 3+4)
	pass("settled again", 3+4)
	pass("settled at last", 3)

	now = now.Add(48 * time.Hour) // qi-12's emptied partition is idle for two days
	if n, err := s.CleanupEmptyPartitions(ctx, pool, 100, 1); err != nil || n != 1 {
		t.Fatalf("cleanup removed %d partitions (%v), want qi-12's one", n, err)
	}
	pass("after an empty partition's cleanup", 3+1)
}

// deadLetter sends queue's first message to the dead-letter queue by a
// failed ack.
func deadLetter(t *testing.T, s *store.Store, queue string) {
	t.Helper()
	ctx := context.Background()
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: queue,
		Patch: store.OptionPatch{RetryLimit: intp(0), DLQAfterMaxRetries: boolp(true)}}); err != nil {
		t.Fatal(err)
	}
	p := popOne(t, s, consume.PopRequest{Queue: queue, Batch: 1})
	out, err := ack(ctx, s, tenant, "", []store.AckItem{{TransactionID: p.Messages[0].TransactionID,
		PartitionID: p.PartitionID, LeaseID: p.LeaseID, Status: "failed", Error: "boom"}})
	if err != nil || !out[0].Success {
		t.Fatalf("failed ack: %+v %v", out, err)
	}
}

// assertSnapshotIsLive fails unless every queue's snapshot equals its live
// counts.
func assertSnapshotIsLive(t *testing.T, s *store.Store, what string) {
	t.Helper()
	ctx := context.Background()
	snap, err := s.SnapshotQueues(ctx, tenant, store.QueueFilter{})
	if err != nil {
		t.Fatal(err)
	}
	live, err := s.ListQueues(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, q := range snap.Queues {
		name := q.Name
		q.Queue = store.Queue{}
		got[name] = fmt.Sprint(q)
	}
	if len(got) != len(live) {
		t.Fatalf("%s: %d queues in the snapshot, %d live", what, len(got), len(live))
	}
	for _, q := range live {
		name := q.Name
		q.Queue = store.Queue{}
		if want := fmt.Sprint(q); got[name] != want {
			t.Fatalf("%s: %s in the snapshot %s, live %s", what, name, got[name], want)
		}
	}
}
