package shards_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/pglocal"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/store/storetest"
)

// TestMain fails the binary on a leaked goroutine.
func TestMain(m *testing.M) { storetest.Main(m) }

// TestSubscribeToSlotOnOneCluster copies a published table between two
// databases of one cluster (shards as the simulator runs them): the slot
// made apart, then the subscription on it. CREATE SUBSCRIPTION making its
// own slot there waits forever; the bounded context turns that into a
// failure. Rows written before the slot, between the slot and the
// subscription, and after it arrive once each (a row applied twice would
// break the destination's primary key and fail the wait). Both calls are
// idempotent, as a restarted copy step needs.
func TestSubscribeToSlotOnOneCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	c, err := pglocal.Start(ctx, pglocal.Options{DataDir: filepath.Join(dir, "pg"), Ephemeral: true,
		LogPath: filepath.Join(dir, "pg.log"), Settings: []string{"wal_level=logical", "max_replication_slots=10",
			"max_wal_senders=10", "max_logical_replication_workers=4", "max_worker_processes=12"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	src, dst := database(ctx, t, c, "s0"), database(ctx, t, c, "s1")
	exec(ctx, t, src, `CREATE PUBLICATION p FOR TABLE t`, `INSERT INTO t SELECT g, 'before' FROM generate_series(1, 100) g`)
	for range 2 {
		if err := shards.CreateSlot(ctx, src, "m1"); err != nil {
			t.Fatal(err)
		}
	}
	exec(ctx, t, src, `INSERT INTO t SELECT g, 'between' FROM generate_series(101, 200) g`, `UPDATE t SET v = 'updated' WHERE id % 7 = 0`)
	for range 2 {
		if err := shards.SubscribeToSlot(ctx, dst, "m1", c.DSN("s0"), "p"); err != nil {
			t.Fatal(err)
		}
	}
	exec(ctx, t, src, `INSERT INTO t SELECT g, 'after' FROM generate_series(201, 300) g`, `DELETE FROM t WHERE id % 10 = 0`)
	if _, err := shards.WaitCaughtUp(ctx, clock.Real{}, src, dst, "m1", "m1", 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	const digest = `SELECT count(*), coalesce(md5(string_agg(id || ':' || v, ',' ORDER BY id)), '') FROM t`
	var n1, n2 int
	var d1, d2 string
	if err := src.QueryRow(ctx, digest).Scan(&n1, &d1); err != nil {
		t.Fatal(err)
	}
	if err := dst.QueryRow(ctx, digest).Scan(&n2, &d2); err != nil {
		t.Fatal(err)
	}
	if n1 != 270 || n1 != n2 || d1 != d2 {
		t.Fatalf("source %d rows (%s), destination %d rows (%s); want 270 equal", n1, d1, n2, d2)
	}
	if err := shards.DetachSubscription(ctx, dst, "m1"); err != nil {
		t.Fatal(err)
	}
	if err := shards.DropSlot(ctx, clock.Real{}, src, "m1"); err != nil {
		t.Fatal(err)
	}
}

// database creates db on c with table t, and opens a pool on it.
func database(ctx context.Context, t *testing.T, c *pglocal.Cluster, db string) *pgxpool.Pool {
	t.Helper()
	admin, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+db); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, c.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	exec(ctx, t, pool, `CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL)`)
	return pool
}

// exec runs each statement on db.
func exec(ctx context.Context, t *testing.T, db shards.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
