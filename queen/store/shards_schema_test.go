package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// undoReplicaIdentitySQL takes migration 023 back: the schema as it was.
var undoReplicaIdentitySQL = []string{
	`ALTER TABLE queen.partitions REPLICA IDENTITY DEFAULT`,
	`ALTER TABLE queen.messages REPLICA IDENTITY DEFAULT`,
	`ALTER TABLE queen.dead_letter_queue REPLICA IDENTITY DEFAULT`,
	`ALTER TABLE queen.message_traces REPLICA IDENTITY DEFAULT`,
	`ALTER TABLE queen.retention_history REPLICA IDENTITY DEFAULT`,
	`CREATE INDEX IF NOT EXISTS dead_letter_queue_partition_failed ON queen.dead_letter_queue (partition_id, failed_at DESC, id DESC)`,
	`DROP INDEX queen.dead_letter_queue_partition_failed_key`,
	`CREATE INDEX IF NOT EXISTS message_traces_partition ON queen.message_traces (partition_id)`,
	`DROP INDEX queen.message_traces_partition_id_key`,
	`DROP INDEX queen.retention_history_queue_id_key`,
}

// walCost is the WAL bytes and time of each phase of walWorkload.
type walCost struct {
	wal  [4]int64
	took [4]time.Duration
}

// walPhases name walWorkload's phases.
var walPhases = [4]string{"push", "pop+ack", "dlq insert", "delete"}

// walWorkload pushes n messages (batches of 50 over 4 partitions), pops
// and acks them all (batches of 50), makes each a dead letter, and deletes
// them (as retention does, the dead letters by cascade), measuring the
// cluster's WAL around each phase.
func walWorkload(t *testing.T, pool *pgxpool.Pool, queue string, n int) walCost {
	t.Helper()
	ctx := context.Background()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	var c walCost
	phase := func(i int, fn func() error) {
		var from string
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&from); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", walPhases[i], err)
		}
		c.took[i] = time.Since(start)
		if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::int8`, from).Scan(&c.wal[i]); err != nil {
			t.Fatal(err)
		}
	}
	phase(0, func() error {
		for i := 0; i < n; i += 50 {
			items := make([]store.PushItem, 50)
			for j := range items {
				items[j] = store.PushItem{Queue: queue, Partition: fmt.Sprintf("p%d", j%4), Payload: crypt.Plain(json.RawMessage(`{"k":"v"}`))}
			}
			if _, err := pushItems(ctx, s, tenant, items, ""); err != nil {
				return err
			}
		}
		return nil
	})
	phase(1, func() error { return popAckAll(ctx, s, queue) })
	phase(2, func() error {
		_, err := pool.Exec(ctx, `INSERT INTO queen.dead_letter_queue (message_id, partition_id, consumer_group, failed_at)
			SELECT m.id, m.partition_id, 'g', now() FROM queen.messages m`)
		return err
	})
	phase(3, func() error {
		_, err := pool.Exec(ctx, `DELETE FROM queen.messages`)
		return err
	})
	return c
}

// popAckAll pops queue in batches of 50 and acks each batch, until empty.
func popAckAll(ctx context.Context, s *store.Store, queue string) error {
	for {
		pop, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: queue, Batch: 50})
		if err != nil || len(pop.Messages) == 0 {
			return err
		}
		acks := make([]store.AckItem, len(pop.Messages))
		for j, m := range pop.Messages {
			acks[j] = store.AckItem{TransactionID: m.TransactionID, PartitionID: pop.PartitionID, LeaseID: pop.LeaseID}
		}
		if _, err := ack(ctx, s, tenant, "", acks); err != nil {
			return err
		}
	}
}

// TestReplicaIdentityCostsNoWAL measures what migration 023 costs: the WAL
// and time of pushes, pops and acks, dead letter inserts and a
// retention-like delete, with and without it, at wal_level=replica and
// logical. Each must write the same WAL either way (within 1 %: the
// replaced indexes are as many as before, and a replica identity is
// logged only for a delete, or an update of its key, and only at
// wal_level=logical), but the delete at logical, whose cost is logged:
// the old key of each deleted message and dead letter.
func TestReplicaIdentityCostsNoWAL(t *testing.T) {
	t.Parallel()
	const n = 4000
	for _, level := range []string{"replica", "logical"} {
		c, after := logicalCluster(t, level, "wal_level="+level, "autovacuum=off", "checkpoint_timeout=1h", "max_wal_size=10GB")
		before := migratedDB(t, c, "queen_before")
		for _, stmt := range undoReplicaIdentitySQL {
			if _, err := before.Exec(context.Background(), stmt); err != nil {
				t.Fatal(err)
			}
		}
		var b, a walCost
		for round := range 2 { // alternating, so neither runs only on a warm cluster
			rb := walWorkload(t, before, fmt.Sprintf("q%d", round), n)
			ra := walWorkload(t, after, fmt.Sprintf("q%d", round), n)
			if round == 1 {
				b, a = rb, ra
			}
		}
		for i, name := range walPhases {
			t.Logf("wal_level=%s %-10s WAL %8d -> %8d bytes (%+.2f %%, %+.1f B/row), time %v -> %v", level, name,
				b.wal[i], a.wal[i], 100*float64(a.wal[i]-b.wal[i])/float64(b.wal[i]), float64(a.wal[i]-b.wal[i])/n,
				b.took[i].Round(time.Millisecond), a.took[i].Round(time.Millisecond))
			same := i < 3 || level == "replica"
			if d := a.wal[i] - b.wal[i]; same && (d > b.wal[i]/100 || -d > b.wal[i]/100) {
				t.Errorf("wal_level=%s %s: WAL %d bytes with migration 023, %d without", level, name, a.wal[i], b.wal[i])
			}
		}
	}
}

// replicaIdentitiesSQL lists the tables whose replica identity is an
// index, with the index, and the indexes 022 replaced that are left.
const replicaIdentitiesSQL = `SELECT coalesce(string_agg(c.relname || '=' || i.indexrelid::regclass::text, ' ' ORDER BY c.relname), '')
	|| ' left:' || coalesce((SELECT string_agg(relname, ',') FROM pg_class
		WHERE relname IN ('dead_letter_queue_partition_failed', 'message_traces_partition')), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_index i ON i.indrelid = c.oid AND i.indisreplident
WHERE n.nspname = 'queen' AND c.relreplident = 'i'`

// Migration 022 (no transaction) runs on grown tables while pushes go on,
// and leaves each per-queue table that needs one its replica identity
// index, the indexes it replaced gone.
func TestShardReplicaIdentityMigrationOnAGrownTable(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool(t)
	ctx := context.Background()
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	if _, err := namesOf(s).Configure(ctx, store.ConfigureInput{Tenant: tenant, Queue: "grown"}); err != nil {
		t.Fatal(err)
	}
	growQueue(t, pool, "grown", 10, 20000, 0)
	growDLQ(t, pool, "grown", 20000)
	for _, stmt := range undoReplicaIdentitySQL {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	pushes, slowest := migrateWhilePushing(t, pool, s, "023_shard_replica_identity", "grown", "during")
	if pushes == 0 {
		t.Fatal("no push ran during the migration")
	}
	t.Logf("migration 023 on 200,000 messages and as many dead letters took %v; %d pushes meanwhile, the slowest %v",
		time.Since(start).Round(time.Millisecond), pushes, slowest.Round(time.Millisecond))
	var got string
	if err := pool.QueryRow(ctx, replicaIdentitiesSQL).Scan(&got); err != nil {
		t.Fatal(err)
	}
	want := "dead_letter_queue=queen.dead_letter_queue_partition_failed_key message_traces=queen.message_traces_partition_id_key " +
		"messages=queen.messages_partition_id_seq_key partitions=queen.partitions_queue_id_name_key " +
		"retention_history=queen.retention_history_queue_id_key left:"
	if got != want {
		t.Fatalf("replica identities:\n got %s\nwant %s", got, want)
	}
}
