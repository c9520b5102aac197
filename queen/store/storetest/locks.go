package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// LockWaitBound is how long AwaitLockWaiters waits, and how long the
// tests that hold rows give a call on an unrelated row before they call it
// stalled: generous, since a busy machine answers in milliseconds. No
// timing is judged below it.
const LockWaitBound = 30 * time.Second

// HoldRows runs sql (a SELECT ... FOR UPDATE) in a transaction it keeps
// open, as an outside session would, and fails the test when it selects
// no row; the returned func (also run at cleanup) releases the rows.
func HoldRows(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (`+sql+`) x`, args...).Scan(&n); err != nil || n == 0 {
		_ = tx.Rollback(ctx)
		t.Fatalf("hold rows: %d rows, %v", n, err)
	}
	var once sync.Once
	release := func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(release)
	return release
}

// AwaitLockWaiters returns once n sessions of the test's database wait for
// a lock at the same moment, and fails the test after LockWaitBound.
func AwaitLockWaiters(t testing.TB, pool *pgxpool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(LockWaitBound)
	for {
		var waiting int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock, want %d", waiting, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
