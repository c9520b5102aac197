// Package storetest gives every test a fresh, migrated PostgreSQL database.
//
// Where the server comes from, in order: PG_TEST_DSN (an admin connection
// string to an existing server); else a throwaway cluster started from the
// system binaries (one per test binary, torn down by Main); else a
// postgres:15 container through dockertest when a Docker engine answers;
// else the test fails and says how to provide one. There is no silent skip.
//
// Each test gets its own database, cloned from a migrated template with
// CREATE DATABASE ... TEMPLATE, so tests run in parallel and never see each
// other's rows.
package storetest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
	"go.uber.org/goleak"

	"github.com/queen-go/queen/queen/pglocal"
	"github.com/queen-go/queen/queen/store"
)

// server is per test binary: one cluster, one template.
var server struct {
	once     sync.Once
	err      error
	cluster  *pglocal.Cluster
	purge    func() // removes the dockertest container
	tmpDir   string
	adminDSN string
	template string
	n        atomic.Int64
}

// Main is the TestMain of every package that uses the database or starts
// goroutines: it runs the tests, stops the cluster it started, and fails the
// binary if goroutines leaked.
func Main(m *testing.M) {
	code := m.Run()
	if server.cluster != nil {
		if err := server.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "storetest:", err)
		}
		os.RemoveAll(server.tmpDir)
	}
	if server.purge != nil {
		server.purge()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "storetest: goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func setup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server.adminDSN = os.Getenv("PG_TEST_DSN")
	if server.adminDSN == "" {
		dir, err := os.MkdirTemp("", "queen-pgtest-")
		if err != nil {
			server.err = err
			return
		}
		server.tmpDir = dir
		c, err := pglocal.Start(ctx, pglocal.Options{DataDir: dir + "/data", Ephemeral: true})
		if err == nil {
			server.cluster = c
			server.adminDSN = c.DSN("postgres")
		} else {
			dsn, purge, derr := dockerPostgres(ctx)
			if derr != nil {
				server.err = fmt.Errorf("%w\nstoretest: dockertest: %v\nstoretest: set PG_TEST_DSN to a PostgreSQL admin DSN, install PostgreSQL's server binaries (apt-get install -y postgresql), or run a Docker engine", err, derr)
				return
			}
			server.adminDSN, server.purge = dsn, purge
		}
	}
	server.template = fmt.Sprintf("queen_tpl_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	admin, err := pgx.Connect(ctx, server.adminDSN)
	if err != nil {
		server.err = fmt.Errorf("storetest: connect %s: %w", redact(server.adminDSN), err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+server.template); err != nil {
		server.err = fmt.Errorf("storetest: create template: %w", err)
		return
	}
	pool, err := pgxpool.New(ctx, dsnFor(server.adminDSN, server.template))
	if err != nil {
		server.err = err
		return
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool); err != nil {
		server.err = fmt.Errorf("storetest: migrate template: %w", err)
	}
}

// DSN returns the connection string of a fresh migrated database, dropped
// when the test ends.
func DSN(t testing.TB) string {
	t.Helper()
	requireServer(t)
	return newDatabase(t, "t", " TEMPLATE "+server.template)
}

// EmptyDSN returns the connection string of a fresh database of the same
// server with no schema at all (not cloned from the migrated template),
// dropped when the test ends: for a database that is not a shard, such as
// the shard catalogue.
func EmptyDSN(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "e", "")
}

// requireServer starts the test server once and fails t without one.
func requireServer(t testing.TB) {
	t.Helper()
	server.once.Do(setup)
	if server.err != nil {
		t.Fatalf("storetest: no PostgreSQL for tests: %v", server.err)
	}
}

// newDatabase creates a database named after the template, kind and a
// counter, with the CREATE DATABASE options given, drops it when the test
// ends, and returns its connection string.
func newDatabase(t testing.TB, kind, options string) string {
	t.Helper()
	requireServer(t)
	name := fmt.Sprintf("%s_%s%d", server.template, kind, server.n.Add(1))
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, server.adminDSN)
	if err != nil {
		t.Fatalf("storetest: connect: %v", err)
	}
	defer admin.Close(ctx)
	for attempt := 0; ; attempt++ {
		_, err = admin.Exec(ctx, `CREATE DATABASE `+name+options)
		// Two clones of one template at once can collide on the
		// template's lock; a short retry settles it.
		if err == nil || attempt >= 20 || !strings.Contains(err.Error(), "being accessed") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("storetest: create database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(ctx, name) })
	return dsnFor(server.adminDSN, name)
}

// AdminDSN is the server's administrative connection string (database
// postgres), for a test that must act on a database from outside it, such
// as refusing its connections to take it down.
func AdminDSN(t testing.TB) string {
	t.Helper()
	requireServer(t)
	return server.adminDSN
}

// dropDatabase drops a test's database, ending its sessions.
func dropDatabase(ctx context.Context, name string) {
	c, err := pgx.Connect(ctx, server.adminDSN)
	if err != nil {
		return
	}
	defer c.Close(ctx)
	_, _ = c.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
}

// Pool returns a pool on a fresh migrated database, closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// dsnFor swaps the database of a DSN (keyword/value or URL form).
func dsnFor(dsn, db string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return dsn
	}
	return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=disable",
		cfg.Host, cfg.Port, cfg.User, quote(cfg.Password), db)
}

func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func redact(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "(unparseable DSN)"
	}
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}

// dockerPostgres starts postgres:15 in a container, for machines with a
// Docker engine and no PostgreSQL binaries.
func dockerPostgres(ctx context.Context) (string, func(), error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return "", nil, err
	}
	if err := pool.Client.Ping(); err != nil {
		return "", nil, fmt.Errorf("no Docker engine answers: %w", err)
	}
	res, err := pool.RunWithOptions(&dockertest.RunOptions{Repository: "postgres", Tag: "15",
		Env: []string{"POSTGRES_PASSWORD=postgres"}, Cmd: []string{"-c", "fsync=off", "-c", "max_connections=400"}},
		func(hc *docker.HostConfig) { hc.AutoRemove = true })
	if err != nil {
		return "", nil, err
	}
	purge := func() { _ = pool.Purge(res) }
	dsn := fmt.Sprintf("host=127.0.0.1 port=%s user=postgres password=postgres dbname=postgres sslmode=disable", res.GetPort("5432/tcp"))
	pool.MaxWait = time.Minute
	err = pool.Retry(func() error {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		return c.Close(ctx)
	})
	if err != nil {
		purge()
		return "", nil, err
	}
	return dsn, purge, nil
}
