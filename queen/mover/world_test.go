package mover_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/mover"
	"github.com/queen-go/queen/queen/pglocal"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

// tenant owns every queue of the tests.
const tenant = "00000000-0000-0000-0000-0000000000a1"

// logicalCluster starts a throwaway cluster with wal_level=logical.
func logicalCluster(t *testing.T, name string) *pglocal.Cluster {
	return storetest.Cluster(t, name, pglocal.LogicalSettings...)
}

// world is a deployment: a catalogue (a database of cluster A's) and two
// shards "a" and "b" (a database on each cluster), every queue placed on
// a at first.
type world struct {
	cat     *catalog.Catalog
	catPool *pgxpool.Pool
	shards  map[string]mover.Shard
	cfg     mover.Config
}

// worlds numbers the databases of one test's worlds.
var worlds struct {
	sync.Mutex
	n int
}

// newWorld makes a fresh world on clusters ca and cb, and a mover config
// on it (CatchUpTimeout 30s unless changed).
func newWorld(t *testing.T, ca, cb *pglocal.Cluster) *world {
	t.Helper()
	ctx := context.Background()
	worlds.Lock()
	worlds.n++
	n := worlds.n
	worlds.Unlock()
	adb, bdb, catdb := fmt.Sprintf("a%d", n), fmt.Sprintf("b%d", n), fmt.Sprintf("cat%d", n)
	w := &world{shards: map[string]mover.Shard{}}
	for _, s := range []struct {
		name, db string
		c        *pglocal.Cluster
	}{{"a", adb, ca}, {"b", bdb, cb}} {
		pool := storetest.CreateDatabase(t, s.c, s.db)
		if err := store.Migrate(ctx, pool); err != nil {
			t.Fatal(err)
		}
		st := store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
		w.shards[s.name] = mover.Shard{Pool: pool, Store: st, ConnInfo: s.c.DSN(s.db)}
	}
	w.catPool = storetest.CreateDatabase(t, ca, catdb)
	if err := catalog.Migrate(ctx, w.catPool); err != nil {
		t.Fatal(err)
	}
	cfg, err := shards.Parse(url(ca, catdb), "a="+url(ca, adb)+";b="+url(cb, bdb), "queue:*=a")
	if err != nil {
		t.Fatal(err)
	}
	w.cat = catalog.New(w.catPool, cfg)
	if err := w.cat.RegisterShards(ctx); err != nil {
		t.Fatal(err)
	}
	w.cfg = mover.Config{Catalog: w.cat, CatalogPool: w.catPool, Shards: w.shards,
		Log: testLog(), Clock: clock.Real{},
		CatchUpTimeout: 30 * time.Second, Poll: 10 * time.Millisecond, DeleteBatch: 100}
	return w
}

// queue is a queue of the tests, with its four partitions.
type queue struct {
	name, id string
	pids     []string // p0 to p3
}

// createQueue creates queue name on shard a with partitions p0 to p3 and
// a queue-mode cursor in each, and places it there at epoch 1.
func (w *world) createQueue(t *testing.T, name string) queue {
	t.Helper()
	ctx := context.Background()
	a := w.shards["a"]
	q := queue{name: name}
	if err := a.Pool.QueryRow(ctx, `SELECT gen_random_uuid()::text, array_agg(gen_random_uuid()::text) FROM generate_series(1, 4)`).
		Scan(&q.id, &q.pids); err != nil {
		t.Fatal(err)
	}
	if err := a.Store.CreateQueues(ctx, a.Pool, store.CreateQueuesParams{Tenant: tenant, IDs: []string{q.id}, Names: []string{name},
		Namespaces: []string{""}, Tasks: []string{""}, LeaseTime: 300, RetryLimit: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Store.CreatePartitions(ctx, a.Pool, store.CreatePartitionsParams{Tenant: tenant, IDs: q.pids,
		Queues: []string{name, name, name, name}, Partitions: []string{"p0", "p1", "p2", "p3"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Store.Subscribe(ctx, store.SubscribeParams{Tenant: tenant, Queue: name, Group: store.QueueModeGroup, Mode: "all"}); err != nil {
		t.Fatal(err)
	}
	p, _, err := w.cat.Place(ctx, shards.Queue{Tenant: tenant, Name: name})
	if err != nil || p.Shard != "a" || p.Epoch != 1 {
		t.Fatalf("placement %+v: %v", p, err)
	}
	return q
}

// slots counts the replication slots and publications on shard a.
func (w *world) slots(t *testing.T) (slots, pubs int) {
	t.Helper()
	err := w.shards["a"].Pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_publication)`).Scan(&slots, &pubs)
	if err != nil {
		t.Fatal(err)
	}
	return slots, pubs
}

// queueRows counts queue q's rows on shard in every per-queue table.
func (w *world) queueRows(t *testing.T, shard string, q queue) int64 {
	t.Helper()
	ctx := context.Background()
	pool := w.shards[shard].Pool
	filters, err := shards.Filters(ctx, pool, shards.QueueRows{QueueID: q.id, Tenant: tenant, Name: q.name, Partitions: q.pids})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for i, f := range filters {
		var n int64
		if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s`, shards.PerQueueTables[i].Name, f)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// url is database db of c as a postgres:// URL, as QUEEN_SHARDS names it.
func url(c *pglocal.Cluster, db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// testLog is the movers' log: stderr under go test -v, else nothing.
func testLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
