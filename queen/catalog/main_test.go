package catalog_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/store/storetest"
)

// TestMain runs the tests on a PostgreSQL of their own and fails the
// binary on a leaked goroutine.
func TestMain(m *testing.M) { storetest.Main(m) }

// The tenants the tests place queues of.
const (
	tenantA = "00000000-0000-0000-0000-0000000000a1"
	tenantB = "00000000-0000-0000-0000-0000000000b2"
)

// config parses a two-shard configuration with the placement rules given.
func config(t testing.TB, rules string) shards.Config {
	t.Helper()
	cfg, err := shards.Parse("postgres://cat/queen", "s0=postgres://a/queen;s1=postgres://b/queen", rules)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// catalogueDSN is a fresh database, migrated as a catalogue.
func catalogueDSN(t testing.TB) string {
	t.Helper()
	dsn := storetest.EmptyDSN(t)
	pool := open(t, dsn)
	if err := catalog.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return dsn
}

// open is a pool on dsn, closed when the test ends: one per broker.
func open(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// broker is one broker's catalogue: its own pool on dsn and its rules,
// with the configured shards registered.
func broker(t testing.TB, dsn, rules string) (*catalog.Catalog, *pgxpool.Pool) {
	t.Helper()
	pool := open(t, dsn)
	c := catalog.New(pool, config(t, rules))
	if err := c.RegisterShards(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, pool
}

// takeDown refuses new connections to dsn's database and ends its
// sessions, as a catalogue that went away; the returned func brings it
// back.
func takeDown(t testing.TB, dsn string) func() {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, storetest.AdminDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+cfg.Database+` WITH ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, cfg.Database); err != nil {
		t.Fatal(err)
	}
	return func() {
		admin, err := pgx.Connect(ctx, storetest.AdminDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, `ALTER DATABASE `+cfg.Database+` WITH ALLOW_CONNECTIONS true`); err != nil {
			t.Fatal(err)
		}
	}
}
