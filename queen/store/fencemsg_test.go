package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/queen-go/queen/queen/store"
)

// A message delete and a trace routed at an epoch the partition is not at
// fail as moved; blocked behind a freeze of that epoch they fail as moved
// once it commits, deleting and recording nothing (a delete or trace
// written on a move's source after its freeze never reaches the
// destination). Without an epoch (no shards) nothing is checked.
func TestMessageDeleteAndTraceMeetTheFence(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pid, qid := fencedPartition(t, ctx, s, "fence-message")
	trace := func(epoch int64) error {
		_, err := s.RecordTrace(ctx, store.TraceParams{Tenant: tenant, PartitionID: pid, TransactionID: "seed",
			ConsumerGroup: store.QueueModeGroup, EventType: "info", Data: json.RawMessage(`1`), Epoch: epoch})
		return err
	}
	del := func(epoch int64) error {
		_, err := s.DeleteMessage(ctx, tenant, pid, "seed", epoch)
		return err
	}
	wantMoved(t, "a delete at epoch 2 of a queue at 1", del(2), qid)
	wantMoved(t, "a trace at epoch 2 of a queue at 1", trace(2), qid)

	freeze, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = freeze.Rollback(ctx) }()
	if _, err := s.Freeze(ctx, freeze, tenant, "fence-message", 1); err != nil {
		t.Fatal(err)
	}
	dels, traces := make(chan error, 1), make(chan error, 1)
	go func() { dels <- del(1) }()
	go func() { traces <- trace(1) }()
	for blocked := 0; blocked < 2; {
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`,
			freeze.Conn().PgConn().PID()).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
		if len(dels)+len(traces) > 0 {
			t.Fatal("a delete or trace did not wait behind the open freeze")
		}
	}
	if err := freeze.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantMoved(t, "the delete that waited behind the freeze", <-dels, qid)
	wantMoved(t, "the trace that waited behind the freeze", <-traces, qid)
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.message_traces WHERE partition_id = $1`, pid).Scan(&n); err != nil || n != 0 {
		t.Fatalf("moved traces recorded %d (%v)", n, err)
	}
	if n := messageCount(t, ctx, s, pid); n != 1 {
		t.Fatalf("a moved delete deleted: %d messages, want 1", n)
	}
	if err := trace(0); err != nil {
		t.Fatalf("a trace without an epoch: %v", err)
	}
	if deleted, err := s.DeleteMessage(ctx, tenant, pid, "seed", 0); err != nil || !deleted {
		t.Fatalf("a delete without an epoch: %v %v", deleted, err)
	}
}
