package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/store"
)

// beforeTheFence puts a migrated database back as the broker before the
// fence (90dd0ed) left it: no epoch columns, no queen.fence_moved, that
// broker's generated step (testdata, its functions' text then: append_rows
// with ten arguments) recorded under its own hash, migration 021's
// push_messages_v3 (025 replaced it with one reading the epochs), and no
// 020_fence_epochs or 025 in the ledger, but 021 to 024 in it. Rows stay.
func beforeTheFence(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	old, err := os.ReadFile("testdata/surface_statements_90dd0ed.sql")
	if err != nil {
		t.Fatal(err)
	}
	push, err := os.ReadFile("migrations/021_surface_push_appends.sql")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(old)
	oldVersion := "020_surface_statements@" + hex.EncodeToString(sum[:6])
	version, _ := store.SurfaceMigration(nil)
	for _, sql := range []string{
		`DROP FUNCTION queen.append_rows(uuid[], uuid[], text[], text[], text[], text[], timestamptz, boolean[], text, boolean, bigint[])`,
		`DROP FUNCTION queen.fence_moved(uuid)`,
		`ALTER TABLE queen.queues DROP COLUMN epoch`,
		`ALTER TABLE queen.partitions DROP COLUMN epoch`,
		`ALTER TABLE queen.partition_consumers DROP COLUMN epoch`,
		string(old),
		string(push),
		`DELETE FROM queen.schema_migrations WHERE version IN ('020_fence_epochs', '025_surface_push_fenced')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%.60s: %v", sql, err)
		}
	}
	tag, err := pool.Exec(ctx, `UPDATE queen.schema_migrations SET version = $2 WHERE version = $1`, version, oldVersion)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("ledger: %v %v", tag, err)
	}
}

// surfacePushOne pushes one message to queue's partition p through the SQL
// surface (migration 021's push_messages_v3, a caller of append_rows).
func surfacePushOne(t *testing.T, ctx context.Context, pool *pgxpool.Pool, queue, p, txid string) {
	t.Helper()
	var status string
	if err := pool.QueryRow(ctx, `SELECT queen.push_messages_v3(jsonb_build_array(jsonb_build_object(
		'queue', $1::text, 'partition', $2::text, 'transactionId', $3::text, 'payload', '{}'::jsonb))) -> 'items' -> 0 ->> 'status'`,
		queue, p, txid).Scan(&status); err != nil || status != "queued" {
		t.Fatalf("surface push %s: %q %v", txid, status, err)
	}
}

// A database the broker before the fence migrated (its ledger holds 021 to
// 024 and its own generated step) migrates to the fence's schema: 020_fence_epochs runs
// though it sorts before steps already recorded, the generated step runs
// again (append_rows gains its epochs), and the rows already stored are at
// epoch 1. Pushes (the broker's and the SQL surface's), pops, acks and a
// freeze then work.
func TestUpgradeFromBeforeTheFence(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
	ctx := context.Background()
	if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "upgrade", Partition: "p0", TransactionID: "before"}}, ""); err != nil {
		t.Fatal(err)
	}
	beforeTheFence(t, ctx, pool)
	surfacePushOne(t, ctx, pool, "upgrade", "p1", "old-surface")
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate from before the fence: %v", err)
	}
	var fenced, functions, live int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM queen.schema_migrations WHERE version = '020_fence_epochs'),
		(SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'queen' AND p.proname = 'append_rows'),
		(SELECT count(*) FROM queen.partitions WHERE epoch <> 1)`).Scan(&fenced, &functions, &live); err != nil {
		t.Fatal(err)
	}
	if fenced != 1 || functions != 1 || live != 0 {
		t.Fatalf("after the upgrade: fence step recorded %d, %d append_rows functions, %d partitions not at epoch 1 (want 1, 1, 0)", fenced, functions, live)
	}
	surfacePushOne(t, ctx, pool, "upgrade", "p2", "new-surface")
	if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "upgrade", Partition: "p0", TransactionID: "after"}}, ""); err != nil {
		t.Fatalf("push after the upgrade: %v", err)
	}
	got := map[string]bool{}
	for range 4 {
		res, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: "upgrade", Group: "g", Batch: 10})
		if err != nil {
			t.Fatalf("pop after the upgrade: %v", err)
		}
		var items []store.AckItem
		for _, m := range res.Messages {
			got[m.TransactionID] = true
			items = append(items, store.AckItem{TransactionID: m.TransactionID, PartitionID: res.PartitionID, LeaseID: res.LeaseID, Status: "completed"})
		}
		if len(items) > 0 {
			if acked, err := ack(ctx, s, tenant, "g", items); err != nil || !acked[0].Success {
				t.Fatalf("ack after the upgrade: %+v %v", acked, err)
			}
		}
	}
	if len(got) != 4 {
		t.Fatalf("popped %v, want before, old-surface, new-surface and after", got)
	}
	if r, err := s.Freeze(ctx, pool, tenant, "upgrade", 1); err != nil || r.Updated == 0 {
		t.Fatalf("freeze after the upgrade: %+v %v", r, err)
	}
}
