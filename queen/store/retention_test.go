package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

func intp(v int) *int    { return &v }
func boolp(v bool) *bool { return &v }

func TestRetentionPassRulesAndLeaderLock(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s := store.New(storetest.Pool(t), store.Options{IDs: ids.NewSource(clock.Real{}, nil),
		DBNow: func() *time.Time { return &now }})
	ctx := context.Background()
	configure := func(q string, p store.OptionPatch) {
		if _, err := s.Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: q, Patch: p}); err != nil {
			t.Fatal(err)
		}
	}
	configure("expiring", store.OptionPatch{RetentionEnabled: boolp(true), RetentionSeconds: intp(60)})
	configure("completed", store.OptionPatch{RetentionEnabled: boolp(true), CompletedRetentionSeconds: intp(60)})
	configure("evicting", store.OptionPatch{MaxWaitTimeSeconds: intp(60)})
	configure("kept", store.OptionPatch{})
	for _, q := range []string{"expiring", "completed", "evicting", "kept"} {
		if _, err := s.Push(ctx, tenant, []store.PushItem{{Queue: q, TransactionID: "old-1"}, {Queue: q, TransactionID: "old-2"}}, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Consume one of the two "completed" messages.
	p, err := s.Pop(ctx, store.PopRequest{Tenant: tenant, Queue: "completed", Batch: 1})
	if err != nil || len(p.Messages) != 1 {
		t.Fatalf("pop: %+v %v", p, err)
	}
	if _, err := s.Ack(ctx, tenant, "", []store.AckItem{{TransactionID: "old-1", PartitionID: p.PartitionID, LeaseID: p.LeaseID}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	release, ok, err := s.TryLeader(ctx, store.RetentionLock)
	if err != nil || !ok {
		t.Fatalf("leader: %v %v", ok, err)
	}
	if _, second, err := s.TryLeader(ctx, store.RetentionLock); err != nil || second {
		t.Fatalf("a second leader while the first holds the lock: %v %v", second, err)
	}
	res, err := s.RetentionPass(ctx, 100)
	release()
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired != 2 || res.Completed != 1 || res.Evicted != 2 {
		t.Fatalf("retention pass: %+v", res)
	}
	left := map[string]int64{}
	qs, _ := s.ListQueues(ctx, tenant)
	for _, q := range qs {
		left[q.Name] = q.Messages
	}
	if left["expiring"] != 0 || left["completed"] != 1 || left["evicting"] != 0 || left["kept"] != 2 {
		t.Fatalf("left after retention: %v", left)
	}
	// The lock was released: another pass (another broker) can lead, and
	// running again changes nothing.
	release, ok, err = s.TryLeader(ctx, store.RetentionLock)
	if err != nil || !ok {
		t.Fatalf("lock not released: %v %v", ok, err)
	}
	defer release()
	if again, err := s.RetentionPass(ctx, 100); err != nil || again != (store.RetentionResult{}) {
		t.Fatalf("second pass: %+v %v", again, err)
	}
}
