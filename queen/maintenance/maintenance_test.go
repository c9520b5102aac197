package maintenance_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/maintenance"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// A reconcile pass that reads the row while a local flip is still being
// written must not undo the flip with the older row it read.
func TestReconcileDuringAFlipDoesNotUndoIt(t *testing.T) {
	pool := storetest.Pool(t)
	st := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	m := maintenance.New(st, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	if err := m.SetPop(ctx, false); err != nil { // the row exists, off
		t.Fatal(err)
	}
	// Hold the row so the next flip's write waits, mid-flip.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) // also on failure, so the blocked flip finishes
	if _, err := tx.Exec(ctx, `SELECT 1 FROM queen.system_state WHERE key = $1 FOR UPDATE`, store.FlagPopMaintenance); err != nil {
		t.Fatal(err)
	}
	flipped := make(chan error, 1)
	go func() { flipped <- m.SetPop(ctx, true) }()
	for !m.Pop() {
		time.Sleep(time.Millisecond)
	}
	if err := m.Load(ctx); err != nil { // reads the old row: off
		t.Fatal(err)
	}
	if !m.Pop() {
		_ = tx.Rollback(ctx)
		<-flipped
		t.Fatal("a reconcile read during the flip switched pop maintenance back off")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-flipped; err != nil {
		t.Fatal(err)
	}
	if err := m.Load(ctx); err != nil || !m.Pop() {
		t.Fatalf("after the flip committed: pop=%v err=%v", m.Pop(), err)
	}
}
