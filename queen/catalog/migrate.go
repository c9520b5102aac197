package catalog

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLock serialises catalogue migration across brokers starting at
// once. It differs from queen/store's (737000) and its leaders' (737001 to
// 737003), so a database that is a shard and the catalogue at once takes
// both migrations without one waiting on the other's lock.
const migrationLock = 737010

// migrationLockSQL waits for the migration advisory lock $1.
const migrationLockSQL = `SELECT pg_advisory_lock($1)`

// migrationUnlockSQL releases the migration advisory lock $1.
const migrationUnlockSQL = `SELECT pg_advisory_unlock($1)`

// migrationsTableSQL creates the catalogue's schema and its own ledger
// (not queen.schema_migrations: the store's ledger names the store's
// files, and a catalogue database need not hold the store's schema).
const migrationsTableSQL = `CREATE SCHEMA IF NOT EXISTS queen_catalog;
		CREATE TABLE IF NOT EXISTS queen_catalog.schema_migrations (
			version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`

// migrationDoneSQL tells whether migration $1 ran.
const migrationDoneSQL = `SELECT EXISTS (SELECT 1 FROM queen_catalog.schema_migrations WHERE version = $1)`

// migrationRecordSQL records migration $1 as run.
const migrationRecordSQL = `INSERT INTO queen_catalog.schema_migrations (version) VALUES ($1)`

// Migrate applies every embedded catalogue migration not yet applied, in
// name order, to the catalogue database, as queen/store's Migrate does to
// a shard: under an advisory lock, so brokers starting together take
// turns, each migration in its own transaction and recorded in the
// ledger, so a rerun is a no-op.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("catalog migrate: acquire: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, migrationLockSQL, migrationLock); err != nil {
		return fmt.Errorf("catalog migrate: lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), migrationUnlockSQL, migrationLock)
	}()
	if _, err := conn.Exec(ctx, migrationsTableSQL); err != nil {
		return fmt.Errorf("catalog migrate: bookkeeping table: %w", err)
	}
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		version := strings.TrimSuffix(strings.TrimPrefix(name, "migrations/"), ".sql")
		if err := migrateOne(ctx, conn, version, name); err != nil {
			return fmt.Errorf("catalog migrate %s: %w", version, err)
		}
	}
	return nil
}

// migrateOne runs the migration file name unless the ledger records
// version, and records it, in one transaction.
func migrateOne(ctx context.Context, conn *pgxpool.Conn, version, name string) error {
	var done bool
	if err := conn.QueryRow(ctx, migrationDoneSQL, version).Scan(&done); err != nil || done {
		return err
	}
	body, err := migrationFS.ReadFile(name)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, string(body)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, migrationRecordSQL, version)
		return err
	})
}
