package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/pglocal"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// logicalCluster starts a throwaway cluster (with settings) and returns it
// with a pool on its migrated database "queen".
func logicalCluster(t *testing.T, name string, settings ...string) (*pglocal.Cluster, *pgxpool.Pool) {
	t.Helper()
	c := storetest.Cluster(t, name, append([]string{"max_replication_slots=10", "max_wal_senders=10"}, settings...)...)
	return c, migratedDB(t, c, "queen")
}

// migratedDB creates database db on c, migrates it and opens a pool on it.
func migratedDB(t *testing.T, c *pglocal.Cluster, db string) *pgxpool.Pool {
	t.Helper()
	pool := storetest.CreateDatabase(t, c, db)
	if err := store.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// queueRows reads what identifies queue name's rows on a shard.
func queueRows(t *testing.T, pool *pgxpool.Pool, name string) shards.QueueRows {
	t.Helper()
	q := shards.QueueRows{Tenant: tenant, Name: name}
	err := pool.QueryRow(context.Background(), `SELECT q.id::text, array_agg(p.id::text ORDER BY p.name)
		FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id WHERE q.tenant_id = $1 AND q.name = $2 GROUP BY q.id`,
		tenant, name).Scan(&q.QueueID, &q.Partitions)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// seedSQL puts two rows of queue @qid (@tenant, @name, partitions @parts)
// in each per-queue table no push, pop or ack writes: @msg is one of its
// messages, @query a streams query. The second row of each is what
// touchSQL deletes.
var seedSQL = []string{
	`INSERT INTO queen.dead_letter_queue (message_id, partition_id, consumer_group, error_message, failed_at)
		SELECT @msg::uuid, (@parts::uuid[])[1], g, 'boom', now() FROM unnest(ARRAY['g', 'g2']) g`,
	`INSERT INTO queen.message_traces (id, message_id, partition_id, transaction_id, data)
		SELECT gen_random_uuid(), @msg::uuid, (@parts::uuid[])[1], t, '{}' FROM unnest(ARRAY['t', 't2']) t`,
	`INSERT INTO queen.retention_history (queue_id, retention_type, messages_deleted, executed_at)
		SELECT @qid::uuid, r, 1, now() FROM unnest(ARRAY['retention', 'completed_retention']) r`,
	`INSERT INTO queen.pop_marks (queue_id) VALUES (@qid::uuid) ON CONFLICT DO NOTHING`,
	`INSERT INTO queen.queue_stats VALUES (@qid::uuid, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, now())`,
	`INSERT INTO queen.stats_queue_minutes (queue_id, minute, broker_id)
		SELECT @qid::uuid, date_trunc('minute', now()), b FROM unnest(ARRAY['b', 'b2']) b`,
	`INSERT INTO queen.log_timers (tenant_id, queue, timer_key, deliver_at, txn, message_id)
		SELECT @tenant::uuid, @name::text, k, now() + interval '1 hour', k, gen_random_uuid() FROM unnest(ARRAY['k', 'k2']) k`,
	`INSERT INTO queen.consumer_groups_metadata (tenant_id, consumer_group, queue_name, subscription_mode, subscription_timestamp)
		SELECT @tenant::uuid, g, @name::text, 'all', now() FROM unnest(ARRAY['g', 'g2']) g`,
	`INSERT INTO queen.consumer_watermarks (tenant_id, queue_name, consumer_group) SELECT @tenant::uuid, @name::text, g FROM unnest(ARRAY['g', 'g2']) g`,
	`INSERT INTO queen_streams.state (query_id, partition_id, key, value) SELECT @query::uuid, (@parts::uuid[])[1], k, '1' FROM unnest(ARRAY['k', 'k2']) k`,
}

// touchSQL updates queue @qid::uuid's rows in every per-queue table and deletes
// the seeded second rows and one message (which the message_deletes and
// dlq_counts triggers count): the writes a row-filtered publication
// breaks on a table whose replica identity lacks the filter's column.
var touchSQL = []string{
	`UPDATE queen.queues SET lease_time = lease_time WHERE id = @qid::uuid`,
	`UPDATE queen.partitions SET last_activity = now() WHERE queue_id = @qid::uuid`,
	`UPDATE queen.messages SET payload = payload WHERE partition_id = ANY (@parts::uuid[])`,
	`DELETE FROM queen.messages WHERE id = (SELECT id FROM queen.messages WHERE partition_id = (@parts::uuid[])[4] ORDER BY seq LIMIT 1)`,
	`UPDATE queen.partition_consumers SET batch_size = batch_size WHERE partition_id = ANY (@parts::uuid[])`,
	`UPDATE queen.dead_letter_queue SET retry_count = retry_count + 1 WHERE partition_id = ANY (@parts::uuid[])`,
	`DELETE FROM queen.dead_letter_queue WHERE partition_id = ANY (@parts::uuid[]) AND consumer_group = 'g2'`,
	`UPDATE queen.message_traces SET data = '{"seen":true}' WHERE partition_id = ANY (@parts::uuid[])`,
	`DELETE FROM queen.message_traces WHERE partition_id = ANY (@parts::uuid[]) AND transaction_id = 't2'`,
	`UPDATE queen.retention_history SET messages_deleted = messages_deleted + 1 WHERE queue_id = @qid::uuid`,
	`DELETE FROM queen.retention_history WHERE queue_id = @qid::uuid AND retention_type = 'completed_retention'`,
	`UPDATE queen.pop_marks SET groups = '{}' WHERE queue_id = @qid::uuid`,
	`UPDATE queen.queue_stats SET pending = pending + 1 WHERE queue_id = @qid::uuid`,
	`UPDATE queen.stats_queue_minutes SET push_requests = push_requests + 1 WHERE queue_id = @qid::uuid`,
	`DELETE FROM queen.stats_queue_minutes WHERE queue_id = @qid::uuid AND broker_id = 'b2'`,
	`UPDATE queen.log_timers SET attempts = attempts + 1 WHERE tenant_id = @tenant::uuid AND queue = @name::text`,
	`DELETE FROM queen.log_timers WHERE tenant_id = @tenant::uuid AND queue = @name::text AND timer_key = 'k2'`,
	`UPDATE queen.consumer_groups_metadata SET subscription_mode = 'new' WHERE tenant_id = @tenant::uuid AND queue_name = @name::text`,
	`DELETE FROM queen.consumer_groups_metadata WHERE tenant_id = @tenant::uuid AND queue_name = @name::text AND consumer_group = 'g2'`,
	`UPDATE queen.consumer_watermarks SET updated_at = now() WHERE tenant_id = @tenant::uuid AND queue_name = @name::text`,
	`DELETE FROM queen.consumer_watermarks WHERE tenant_id = @tenant::uuid AND queue_name = @name::text AND consumer_group = 'g2'`,
	`UPDATE queen_streams.state SET value = '2' WHERE partition_id = ANY (@parts::uuid[])`,
	`DELETE FROM queen_streams.state WHERE partition_id = ANY (@parts::uuid[]) AND key = 'k2'`,
}

// runAll runs each statement with q's identity and extra as its named
// arguments.
func runAll(ctx context.Context, pool *pgxpool.Pool, stmts []string, q shards.QueueRows, extra pgx.NamedArgs) error {
	args := pgx.NamedArgs{"qid": q.QueueID, "tenant": q.Tenant, "name": q.Name, "parts": q.Partitions}
	for k, v := range extra {
		args[k] = v
	}
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s, args); err != nil {
			return fmt.Errorf("%.60s: %w", s, err)
		}
	}
	return nil
}

// traffic pushes, pops and acks on each queue until stop closes, and
// reports the first error.
func traffic(ctx context.Context, s *store.Store, queues []string, stop <-chan struct{}) error {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		for _, q := range queues {
			items := make([]store.PushItem, 4)
			for j := range items {
				items[j] = store.PushItem{Queue: q, Partition: fmt.Sprintf("p%d", (i+j)%4),
					Payload: crypt.Plain(json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))}
			}
			if _, err := pushItems(ctx, s, tenant, items, ""); err != nil {
				return fmt.Errorf("push %s: %w", q, err)
			}
			pop, err := claim(ctx, s, consume.PopRequest{Tenant: tenant, Queue: q, Batch: 3})
			if err != nil {
				return fmt.Errorf("pop %s: %w", q, err)
			}
			acks := make([]store.AckItem, len(pop.Messages))
			for j, m := range pop.Messages {
				acks[j] = store.AckItem{TransactionID: m.TransactionID, PartitionID: pop.PartitionID, LeaseID: pop.LeaseID}
			}
			if _, err := ack(ctx, s, tenant, "", acks); len(acks) > 0 && err != nil {
				return fmt.Errorf("ack %s: %w", q, err)
			}
		}
	}
}

// rowsOf is every row of table (as text, sorted) that where selects.
func rowsOf(t *testing.T, pool *pgxpool.Pool, table, where string) []string {
	t.Helper()
	var rows []string
	err := pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT coalesce(array_agg(x::text ORDER BY x::text), '{}') FROM %s x WHERE %s`,
		table, where)).Scan(&rows)
	if err != nil {
		t.Fatalf("%s: %v", table, err)
	}
	return rows
}

// TestShardCopyByLogicalReplication copies one queue from a source shard to
// a destination with a row-filtered publication while both it and another
// queue of the source take pushes, pops, acks and updates and deletes of
// every per-queue table (which PostgreSQL refuses on a table whose replica
// identity lacks the filter's column: migration 023). After catch-up the
// destination holds exactly the moving queue's rows, equal to the
// source's; then the subscription and the slot go, both ways a mover can
// drop them.
func TestShardCopyByLogicalReplication(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src, srcPool := logicalCluster(t, "source", "wal_level=logical")
	dst, dstPool := logicalCluster(t, "dest", "wal_level=logical")
	s := store.New(srcPool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	queues := []string{"moving", "staying"}
	// Every partition exists before the copy: the publication lists them.
	for _, q := range queues {
		for p := range 4 {
			if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: q, Partition: fmt.Sprintf("p%d", p)}}, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	var queryID string
	if err := srcPool.QueryRow(ctx, `INSERT INTO queen_streams.queries (name, source_queue, config_hash) VALUES ('sq', 'moving', 'h') RETURNING id::text`).Scan(&queryID); err != nil {
		t.Fatal(err)
	}
	rows := map[string]shards.QueueRows{}
	for _, q := range queues {
		rows[q] = queueRows(t, srcPool, q)
		var msg string
		if err := srcPool.QueryRow(ctx, `SELECT id::text FROM queen.messages WHERE partition_id = $1`, rows[q].Partitions[0]).Scan(&msg); err != nil {
			t.Fatal(err)
		}
		if err := runAll(ctx, srcPool, seedSQL, rows[q], pgx.NamedArgs{"msg": msg, "query": queryID}); err != nil {
			t.Fatal(err)
		}
	}
	moving := rows["moving"]
	if err := shards.CreatePublication(ctx, srcPool, "queen_move_1", moving); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var trafficErr error
	wg.Go(func() { trafficErr = traffic(ctx, s, queues, stop) })
	if err := shards.CreateSubscription(ctx, dstPool, "queen_move_1", src.DSN("queen"), "queen_move_1"); err != nil {
		t.Fatal(err)
	}
	// Writes of both queues while the initial copy runs and after it.
	for range 3 {
		for _, q := range queues {
			if err := runAll(ctx, srcPool, touchSQL, rows[q], nil); err != nil {
				close(stop)
				wg.Wait()
				t.Fatalf("%s: %v", q, err)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if trafficErr != nil {
		t.Fatal(trafficErr)
	}
	if _, err := shards.WaitCaughtUp(ctx, clock.Real{}, srcPool, dstPool, "queen_move_1", "queen_move_1", 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// A last burst, streamed after the initial copy: only a wait for the
	// slot's position (not the tables' readiness) sees it applied.
	burst := make([]store.PushItem, 5000)
	for i := range burst {
		burst[i] = store.PushItem{Queue: "moving", Partition: fmt.Sprintf("p%d", i%4), Payload: crypt.Plain(json.RawMessage(`{"burst":true}`))}
	}
	if _, err := pushItems(ctx, s, tenant, burst, ""); err != nil {
		t.Fatal(err)
	}
	mark, err := shards.WaitCaughtUp(ctx, clock.Real{}, srcPool, dstPool, "queen_move_1", "queen_move_1", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var received bool
	if err := dstPool.QueryRow(ctx, `SELECT received_lsn >= $1::pg_lsn FROM pg_stat_subscription WHERE subname = 'queen_move_1' AND relid IS NULL`, mark).Scan(&received); err != nil || !received {
		t.Fatalf("the subscription's received lsn is behind the mark %s: %v", mark, err)
	}
	checkCopied(t, srcPool, dstPool, "moving")
	if t.Failed() {
		logReplication(t, srcPool, dstPool, mark)
	}

	// A mover whose source is lost detaches and drops the slot apart;
	// a second subscription (a restarted copy) is dropped with its slot.
	if err := shards.DetachSubscription(ctx, dstPool, "queen_move_1"); err != nil {
		t.Fatal(err)
	}
	if slotCount(t, srcPool) != 1 {
		t.Fatal("detaching must leave the slot on the source")
	}
	if err := shards.DropSlot(ctx, clock.Real{}, srcPool, "queen_move_1"); err != nil {
		t.Fatal(err)
	}
	if err := shards.CreatePublication(ctx, srcPool, "queen_move_1", moving); err != nil {
		t.Fatalf("the publication again (a restarted step): %v", err)
	}
	dst2Pool := migratedDB(t, dst, "queen2")
	if err := shards.CreateSubscription(ctx, dst2Pool, "queen_move_2", src.DSN("queen"), "queen_move_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := shards.WaitCaughtUp(ctx, clock.Real{}, srcPool, dst2Pool, "queen_move_2", "queen_move_2", 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	checkCopied(t, srcPool, dst2Pool, "moving")
	copyConflicts(ctx, t, src, dst, srcPool, moving)
	if err := shards.DropSubscription(ctx, dst2Pool, "queen_move_2"); err != nil {
		t.Fatal(err)
	}
	if err := shards.DropPublication(ctx, srcPool, "queen_move_1"); err != nil {
		t.Fatal(err)
	}
	if n := slotCount(t, srcPool); n != 0 {
		t.Fatalf("%d slots left on the source", n)
	}
}

// ownerOf names, per per-queue table, the queue that owns a row x: the
// test's own account, so that a publication filter selecting too much or
// too little is caught rather than restated.
var ownerOf = map[string]string{
	"queen.queues":                   `x.name`,
	"queen.partitions":               `(SELECT q.name FROM queen.queues q WHERE q.id = x.queue_id)`,
	"queen.retention_history":        `(SELECT q.name FROM queen.queues q WHERE q.id = x.queue_id)`,
	"queen.pop_marks":                `(SELECT q.name FROM queen.queues q WHERE q.id = x.queue_id)`,
	"queen.queue_stats":              `(SELECT q.name FROM queen.queues q WHERE q.id = x.queue_id)`,
	"queen.stats_queue_minutes":      `(SELECT q.name FROM queen.queues q WHERE q.id = x.queue_id)`,
	"queen.log_timers":               `x.queue`,
	"queen.consumer_groups_metadata": `x.queue_name`,
	"queen.consumer_watermarks":      `x.queue_name`,
}

// byPartitionOwner is ownerOf for a table keyed by partition.
const byPartitionOwner = `(SELECT q.name FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = x.partition_id)`

// copyConflicts copies into a destination that holds a dead letter of its
// own whose id (a per-cluster bigserial) one of the moving queue's dead
// letters also has: the subscription's copy fails on the primary key and
// retries forever, and WaitCaughtUp says so rather than wait. A mover must
// keep those ids apart (per-shard sequence ranges) before it copies.
func copyConflicts(ctx context.Context, t *testing.T, src, dst *pglocal.Cluster, srcPool *pgxpool.Pool, moving shards.QueueRows) {
	t.Helper()
	var id int64
	if err := srcPool.QueryRow(ctx, `SELECT min(id) FROM queen.dead_letter_queue WHERE partition_id = ANY ($1::uuid[])`, moving.Partitions).Scan(&id); err != nil {
		t.Fatal(err)
	}
	pool := migratedDB(t, dst, "queen3")
	s := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	if _, err := pushItems(ctx, s, tenant, []store.PushItem{{Queue: "resident"}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO queen.dead_letter_queue (id, message_id, partition_id, consumer_group, failed_at)
		SELECT $1, id, partition_id, 'g', now() FROM queen.messages`, id); err != nil {
		t.Fatal(err)
	}
	if err := shards.CreateSubscription(ctx, pool, "queen_move_3", src.DSN("queen"), "queen_move_1"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err := shards.WaitCaughtUp(wctx, clock.Real{}, srcPool, pool, "queen_move_3", "queen_move_3", 20*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "queen_move_3: its workers failed") {
		t.Fatalf("a copy whose dead letter ids collide: %v", err)
	}
	if err := shards.DetachSubscription(ctx, pool, "queen_move_3"); err != nil {
		t.Fatal(err)
	}
	if err := shards.DropSlot(ctx, clock.Real{}, srcPool, "queen_move_3"); err != nil {
		t.Fatal(err)
	}
}

// checkCopied compares every per-queue table: the destination's rows are
// the source's rows that queue owns, and every table holds some.
func checkCopied(t *testing.T, src, dst *pgxpool.Pool, queue string) {
	t.Helper()
	for _, tbl := range shards.PerQueueTables {
		owner, ok := ownerOf[tbl.Name]
		if !ok {
			owner = byPartitionOwner
		}
		want := rowsOf(t, src, tbl.Name, owner+" = '"+queue+"'")
		got := rowsOf(t, dst, tbl.Name, "true")
		if len(want) == 0 {
			t.Errorf("%s: the moving queue has no rows here; the test seeds every table", tbl.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: destination %d rows, source %d of the moving queue\n got %.300s\nwant %.300s", tbl.Name, len(got), len(want),
				fmt.Sprint(got), fmt.Sprint(want))
		}
	}
}

// logReplication logs where the slots and the subscriptions stand, for a
// failed comparison: lag (positions) or loss (worker errors).
func logReplication(t *testing.T, src, dst *pgxpool.Pool, mark string) {
	ctx := context.Background()
	var slots, subs, errs string
	_ = src.QueryRow(ctx, `SELECT string_agg(slot_name || ' confirmed ' || confirmed_flush_lsn::text, '; ') FROM pg_replication_slots`).Scan(&slots)
	_ = dst.QueryRow(ctx, `SELECT string_agg(subname || ' received ' || coalesce(received_lsn::text, '-'), '; ') FROM pg_stat_subscription`).Scan(&subs)
	_ = dst.QueryRow(ctx, `SELECT string_agg(subname || ' sync errors ' || sync_error_count || ' apply errors ' || apply_error_count, '; ')
		FROM pg_stat_subscription_stats`).Scan(&errs)
	t.Logf("mark %s; source slots: %s; destination: %s; %s", mark, slots, subs, errs)
}

func slotCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
