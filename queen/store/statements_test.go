package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/leader"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// timedStore is a store whose database "now" the test moves.
func timedStore(t *testing.T, o store.Options) (*store.Store, *time.Time) {
	t.Helper()
	now := time.Now().UTC()
	o.IDs = ids.NewSource(clock.Real{}, nil)
	o.DBNow = func() *time.Time { v := now; return &v }
	return store.New(storetest.Pool(t), o), &now
}

func push(t *testing.T, s *store.Store, queue, partition, txid string) {
	t.Helper()
	res, err := pushItems(context.Background(), s, tenant, []store.PushItem{{Queue: queue, Partition: partition, TransactionID: txid}}, "")
	if err != nil || res[0].Status != "queued" {
		t.Fatalf("push %s/%s %s: %+v %v", queue, partition, txid, res, err)
	}
}

func popOne(t *testing.T, s *store.Store, req consume.PopRequest) consume.PopResult {
	t.Helper()
	req.Tenant = tenant
	res, err := claim(context.Background(), s, req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func ackAll(t *testing.T, s *store.Store, group string, res consume.PopResult) {
	t.Helper()
	items := make([]store.AckItem, len(res.Messages))
	for i, m := range res.Messages {
		items[i] = store.AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: res.LeaseID}
	}
	out, err := s.Ack(context.Background(), tenant, group, items)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out {
		if !r.Success {
			t.Fatalf("ack: %+v", out)
		}
	}
}

// A partition that keeps getting messages must not starve the others: a
// wildcard pop serves the least-recently-claimed partition first.
func TestWildcardPopServesLeastRecentlyClaimedFirst(t *testing.T) {
	t.Parallel()
	s, _ := timedStore(t, store.Options{})
	push(t, s, "fair", "busy", "b-0") // created first: the lower partition id
	push(t, s, "fair", "quiet", "q-0")
	first := popOne(t, s, consume.PopRequest{Queue: "fair", Batch: 1})
	if first.Partition != "busy" {
		t.Fatalf("first pop: want the never-claimed lowest id (busy), got %q", first.Partition)
	}
	ackAll(t, s, "", first)
	push(t, s, "fair", "busy", "b-1")
	second := popOne(t, s, consume.PopRequest{Queue: "fair", Batch: 1})
	if second.Partition != "quiet" {
		t.Fatalf("second pop served %q again; quiet was never claimed", second.Partition)
	}
}

// A claim released because its client left served nobody: the partition
// gets its turn back instead of going behind every other partition.
func TestReleasedClaimKeepsItsTurn(t *testing.T) {
	t.Parallel()
	s, now := timedStore(t, store.Options{})
	for _, p := range []string{"a", "b", "c"} {
		push(t, s, "turn", p, p+"-0")
	}
	for _, p := range []string{"b", "c"} { // a has never been claimed: it is next
		*now = now.Add(time.Second)
		ackAll(t, s, "", popOne(t, s, consume.PopRequest{Queue: "turn", Partition: p, Batch: 1}))
		push(t, s, "turn", p, p+"-1")
	}
	*now = now.Add(time.Second)
	gone := popOne(t, s, consume.PopRequest{Queue: "turn", Batch: 1})
	if gone.Partition != "a" {
		t.Fatalf("wildcard pop: want the never-claimed a, got %q", gone.Partition)
	}
	if _, err := s.Release(context.Background(), gone.LeaseID); err != nil { // its client left
		t.Fatal(err)
	}
	*now = now.Add(time.Second)
	if next := popOne(t, s, consume.PopRequest{Queue: "turn", Batch: 1}); next.Partition != "a" {
		t.Fatalf("after the release the next pop served %q; a lost its turn to an abandoned client", next.Partition)
	}
}

// Rows past a cursor that eviction deleted leave last_seq ahead of the
// cursor; such a partition must not take the claim from one with messages.
func TestEmptiedPartitionDoesNotBlockWildcardPop(t *testing.T) {
	t.Parallel()
	s, now := timedStore(t, store.Options{})
	ctx := context.Background()
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "ev",
		Patch: store.OptionPatch{MaxWaitTimeSeconds: intp(60)}}); err != nil {
		t.Fatal(err)
	}
	push(t, s, "ev", "a-evicted", "a-1")
	*now = now.Add(2 * time.Minute)
	if res, err := leader.RetentionPass(ctx, s, s.Pool(), 100); err != nil || res.Evicted != 1 {
		t.Fatalf("eviction: %+v %v", res, err)
	}
	push(t, s, "ev", "b-live", "b-1")
	got := popOne(t, s, consume.PopRequest{Queue: "ev", Batch: 10})
	if len(got.Messages) != 1 || got.Partition != "b-live" {
		t.Fatalf("pop: want b-live's message, got %+v", got)
	}
}

// A partition whose head is still inside delayedProcessing must not take
// the claim from one whose head is visible.
func TestDelayedHeadDoesNotBlockWildcardPop(t *testing.T) {
	t.Parallel()
	s, now := timedStore(t, store.Options{})
	ctx := context.Background()
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "dl",
		Patch: store.OptionPatch{DelayedProcessing: intp(30)}}); err != nil {
		t.Fatal(err)
	}
	t0 := *now
	push(t, s, "dl", "a-fresh", "a-0") // created first: the lower partition id
	push(t, s, "dl", "b-old", "b-0")
	*now = t0.Add(time.Minute)
	both := popOne(t, s, consume.PopRequest{Queue: "dl", Batch: 10, Partitions: 2})
	if len(both.Messages) != 2 {
		t.Fatalf("first pop: %+v", both)
	}
	ackAll(t, s, "", both)
	push(t, s, "dl", "a-fresh", "a-1") // hidden for 30 s
	*now = t0
	push(t, s, "dl", "b-old", "b-1") // created at t0: visible
	*now = t0.Add(time.Minute)
	got := popOne(t, s, consume.PopRequest{Queue: "dl", Batch: 10})
	if len(got.Messages) != 1 || got.Messages[0].TransactionID != "b-1" {
		t.Fatalf("want b-1 while a-fresh's head is delayed, got %+v", got)
	}
	ackAll(t, s, "", got)
	if early := popOne(t, s, consume.PopRequest{Queue: "dl", Batch: 10}); len(early.Messages) != 0 {
		t.Fatalf("delivered inside delayedProcessing: %+v", early)
	}
	*now = t0.Add(2 * time.Minute)
	last := popOne(t, s, consume.PopRequest{Queue: "dl", Batch: 10})
	if len(last.Messages) != 1 || last.Messages[0].TransactionID != "a-1" {
		t.Fatalf("after the delay: %+v", last)
	}
}

// "completed" retention never deletes what a subscribed group has not
// consumed, even in a partition where that group has no cursor row yet.
func TestCompletedRetentionWaitsForEverySubscribedGroup(t *testing.T) {
	t.Parallel()
	s, now := timedStore(t, store.Options{})
	ctx := context.Background()
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "cr",
		Patch: store.OptionPatch{RetentionEnabled: boolp(true), CompletedRetentionSeconds: intp(60)}}); err != nil {
		t.Fatal(err)
	}
	push(t, s, "cr", "p", "m-1")
	fast := popOne(t, s, consume.PopRequest{Queue: "cr", Group: "fast"})
	ackAll(t, s, "fast", fast)
	slow := popOne(t, s, consume.PopRequest{Queue: "cr", Group: "slow"}) // subscribes slow
	if len(slow.Messages) != 1 {
		t.Fatalf("slow pop: %+v", slow)
	}
	if _, err := s.Release(ctx, slow.LeaseID); err != nil {
		t.Fatal(err)
	}
	// slow's cursor row in p goes missing (a partition that appeared while
	// it subscribed, in the worst interleaving): its subscription still
	// holds the messages back.
	if _, err := s.Pool().Exec(ctx, `DELETE FROM queen.partition_consumers WHERE consumer_group = 'slow'`); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(2 * time.Minute)
	res, err := leader.RetentionPass(ctx, s, s.Pool(), 100)
	if err != nil || res.Completed != 0 {
		t.Fatalf("retention deleted a message the slow group never consumed: %+v %v", res, err)
	}
}

// A group's subscription reaches partitions created after it.
func TestSubscribedGroupSeesPartitionsCreatedLater(t *testing.T) {
	t.Parallel()
	s, _ := timedStore(t, store.Options{})
	push(t, s, "later", "first", "f-1")
	got := popOne(t, s, consume.PopRequest{Queue: "later", Group: "g", Batch: 10})
	ackAll(t, s, "g", got)
	push(t, s, "later", "second", "s-1")
	got = popOne(t, s, consume.PopRequest{Queue: "later", Group: "g", Batch: 10})
	if len(got.Messages) != 1 || got.Messages[0].TransactionID != "s-1" {
		t.Fatalf("pop after a new partition: %+v", got)
	}
}
