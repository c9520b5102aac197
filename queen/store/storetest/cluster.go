package storetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/pglocal"
)

// Cluster starts a throwaway cluster of the test's own, with settings
// (name=value each) the shared one lacks, such as pglocal.LogicalSettings
// for a move's logical replication; it stops when the test ends. Its log
// is kept in the test's temporary directory.
func Cluster(t testing.TB, name string, settings ...string) *pglocal.Cluster {
	t.Helper()
	dir := t.TempDir()
	c, err := pglocal.Start(context.Background(), pglocal.Options{DataDir: filepath.Join(dir, name), Ephemeral: true,
		LogPath: filepath.Join(dir, name+".log"), Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// CreateDatabase creates database db on c and opens a pool on it, closed
// when the test ends.
func CreateDatabase(t testing.TB, c *pglocal.Cluster, db string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{db}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, c.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
