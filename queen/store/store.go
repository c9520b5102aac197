// Package store is queen's PostgreSQL layer: the embedded schema migrations,
// every SQL statement the broker runs, and the classification of database
// errors by SQLSTATE. It knows nothing of HTTP.
//
// Each hot operation is one named statement (a SQL constant with a params
// struct and the invariant it protects beside it): appendSQL for a push,
// popSQL for a pop (popOneSQL when it claims one partition), ackCompletedSQL for a batch of completions; a general
// ack batch or a transaction is a fixed, small number of statements.
// Pushes reach it as rows (NewRows) and one append statement (AppendRows),
// sealed and deduplicated by the write policy (queen/writes),
// completions as one ackCompletedSQL (AckCompletions): combining concurrent
// calls and retrying them is queen/pushpath's and queen/consume's, over
// queen/combine. Names resolve to ids through queen/names' process cache,
// over LookupPartitions and CreateQueues, CreatePartitions and
// CreateConsumers (names creates what is missing).
//
// Correctness time is PostgreSQL's: every statement computes
// coalesce($now, now()) inline and decides lease expiry, delays and windows
// against it. Production passes NULL; the simulator passes one virtual
// instant through Options.DBNow. (The admin listings still read it once per
// transaction through inTx.)
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/clock"

	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/ids"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// DefaultTenant owns every queue when tenancy is off.
const DefaultTenant = config.DefaultTenant

// migrationLock serialises schema migration across brokers starting at once.
const migrationLock = 737000

// Options configure a Store.
type Options struct {
	// DBNow, when set, returns the instant the database must treat as now.
	// Nil (production) means PostgreSQL's now().
	DBNow func() *time.Time
	// IDs mints message ids and lease tokens.
	IDs *ids.Source
	// TxTimeout bounds every transaction on the client side, so a database
	// that stopped answering (a blackholed link) fails the call instead of
	// hanging it. Zero means no bound beyond the caller's context.
	TxTimeout time.Duration
	// Clock is the store's time; nil means the wall clock.
	Clock clock.Clock
	// ReadOnly follows whether the database was last seen read-only; its
	// OnPgError belongs on the pool's connection config. Nil: not followed.
	ReadOnly *ReadOnlyWatch
}

// Store runs queen's statements over a connection pool.
type Store struct {
	pool      *pgxpool.Pool
	dbNow     func() *time.Time
	ids       *ids.Source
	txTimeout time.Duration
	clock     clock.Clock
	readOnly  *ReadOnlyWatch
}

// New wraps an open pool.
func New(pool *pgxpool.Pool, o Options) *Store {
	if o.DBNow == nil {
		o.DBNow = func() *time.Time { return nil }
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	return &Store{pool: pool, dbNow: o.DBNow, ids: o.IDs, txTimeout: o.TxTimeout, clock: o.Clock,
		readOnly: o.ReadOnly}
}

// bound applies the client-side statement bound (TxTimeout), so a database
// that stopped answering fails the call instead of hanging it.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.txTimeout > 0 {
		return context.WithTimeout(ctx, s.txTimeout)
	}
	return context.WithCancel(ctx)
}

// Executor is what a statement runs on: the pool (autocommit), one
// pooled connection (a leader's lock session, Leader.Executor) or a
// transaction. The statements that policy outside the store runs where
// it chooses take one.
type Executor interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// querier is the store's own name for an Executor.
type querier = Executor

// Pool exposes the pool for health and metrics.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// migrationLockSQL waits for the migration advisory lock $1.
const migrationLockSQL = `SELECT pg_advisory_lock($1)`

// migrationUnlockSQL releases the migration advisory lock $1.
const migrationUnlockSQL = `SELECT pg_advisory_unlock($1)`

// migrationsTableSQL creates the schema and its migrations ledger.
const migrationsTableSQL = `CREATE SCHEMA IF NOT EXISTS queen;
		CREATE TABLE IF NOT EXISTS queen.schema_migrations (
			version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`

// migrationDoneSQL tells whether migration $1 ran.
const migrationDoneSQL = `SELECT EXISTS (SELECT 1 FROM queen.schema_migrations WHERE version = $1)`

// migrationRecordSQL records migration $1 as run.
const migrationRecordSQL = `INSERT INTO queen.schema_migrations (version) VALUES ($1)`

// Migrate applies every migration not yet applied: the embedded files and
// the generated step (generatedMigration), in name order. It holds an
// advisory lock for the duration, so brokers starting together take turns;
// each migration runs in its own transaction and is recorded in
// queen.schema_migrations, so a rerun is a no-op.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, migrationLockSQL, migrationLock); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), migrationUnlockSQL, migrationLock)
	}()
	if _, err := conn.Exec(ctx, migrationsTableSQL); err != nil {
		return fmt.Errorf("migrate: bookkeeping table: %w", err)
	}
	steps, err := migrations()
	if err != nil {
		return err
	}
	for _, m := range steps {
		if err := migrateOne(ctx, conn, m); err != nil {
			return fmt.Errorf("migrate %s: %w", m.version, err)
		}
	}
	return nil
}

// migration is one step of the schema: its ledger key (the file's name
// without .sql, or the generated step's name and text hash), its place in
// the order, and its SQL.
type migration struct {
	version, order, body string
}

// migrations are the embedded files and the generated step, in order.
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	steps := []migration{generatedMigration()}
	for _, name := range names {
		body, err := migrationFS.ReadFile(name)
		if err != nil {
			return nil, err
		}
		version := strings.TrimSuffix(strings.TrimPrefix(name, "migrations/"), ".sql")
		steps = append(steps, migration{version: version, order: version, body: string(body)})
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i].order < steps[j].order })
	return steps, nil
}

// migrateOne runs m unless the ledger records it, and records it.
func migrateOne(ctx context.Context, conn *pgxpool.Conn, m migration) error {
	var done bool
	if err := conn.QueryRow(ctx, migrationDoneSQL, m.version).Scan(&done); err != nil || done {
		return err
	}
	if strings.HasPrefix(m.body, noTransaction) {
		if err := migrateConcurrently(ctx, conn, m.body); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, migrationRecordSQL, m.version)
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, m.body); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, migrationRecordSQL, m.version)
		return err
	})
}

// noTransaction opens a migration whose statements run one by one outside
// any transaction: CREATE INDEX CONCURRENTLY, which builds an index on a
// large table without blocking its writes, cannot run inside one. Each
// statement must be idempotent (IF NOT EXISTS), since a failure part way
// leaves the earlier ones done.
const noTransaction = "-- queen:no-transaction"

// concurrentIndex names the index of a CREATE INDEX CONCURRENTLY IF NOT
// EXISTS statement.
var concurrentIndex = regexp.MustCompile(`(?i)^CREATE\s+(UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+(\w+)\s+ON\s+(\w+)\.`)

// dropIndexSQL drops an index, schema and name formatted in (identifiers
// cannot be arguments; both come from the embedded migration's text).
const dropIndexSQL = `DROP INDEX CONCURRENTLY IF EXISTS %s.%s`

// invalidIndexSQL tells whether index $2 of schema $1 was left INVALID by an
// interrupted build.
const invalidIndexSQL = `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
				JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2 AND NOT i.indisvalid)`

// migrateConcurrently runs a no-transaction migration's statements (split
// at semicolons ending a line), each on its own. An index that an earlier,
// interrupted build left INVALID is dropped and built again: IF NOT EXISTS
// alone would keep it, unused, forever.
func migrateConcurrently(ctx context.Context, conn *pgxpool.Conn, body string) error {
	for _, stmt := range strings.Split(body, ";\n") {
		stmt = strings.TrimSpace(stripComments(stmt))
		if stmt == "" {
			continue
		}
		if m := concurrentIndex.FindStringSubmatch(stmt); m != nil {
			var invalid bool
			err := conn.QueryRow(ctx, invalidIndexSQL, m[3], m[2]).Scan(&invalid)
			if err != nil {
				return err
			}
			if invalid {
				if _, err := conn.Exec(ctx, fmt.Sprintf(dropIndexSQL, m[3], m[2])); err != nil {
					return err
				}
			}
		}
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%.80s: %w", stmt, err)
		}
	}
	return nil
}

// stripComments drops the -- comment lines of a statement.
func stripComments(stmt string) string {
	var b strings.Builder
	for _, line := range strings.Split(stmt, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
			b.WriteString("\n")
		}
	}
	return b.String()
}

// nowSQL is the database's now, or the injected one ($1).
const nowSQL = `SELECT coalesce($1::timestamptz, now())`

// inTx runs fn in a READ COMMITTED transaction and hands it the database's
// notion of now, read once at the start.
func (s *Store) inTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx, now time.Time) error) error {
	if s.txTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.txTimeout)
		defer cancel()
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var now time.Time
		if err := tx.QueryRow(ctx, nowSQL, s.dbNow()).Scan(&now); err != nil {
			return err
		}
		return fn(ctx, tx, now)
	})
}

// InTx runs fn in one transaction, bounded by Options.TxTimeout, that
// first reads the database instant (as every admin write's transaction
// does): for the composite writes begun outside the store (a timers call,
// queen/writes' ApplyTimers).
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, _ time.Time) error { return fn(ctx, tx) })
}

// Now returns the database's current instant (or the injected one).
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := s.pool.QueryRow(ctx, nowSQL, s.dbNow()).Scan(&now)
	return now, err
}

// DBNow is the instant a statement's caller passes as its now argument:
// the injected one (Options.DBNow), nil in production, where each
// statement reads PostgreSQL's now() itself.
func (s *Store) DBNow() *time.Time { return s.dbNow() }

// NewID mints an id from the store's source (Options.IDs) for a row a
// caller outside the store describes to a statement (CreateQueuesParams,
// CreatePartitionsParams): seeded in the simulator, so a run replays.
func (s *Store) NewID() string { return s.ids.New() }

// errRollback carries a business failure out of a transaction so that it
// rolls back without being mistaken for a database error.
// Its reason is one of Queen's transaction failure codes (bad_request,
// ack_rejected, push_rejected), "" where none applies.
type errRollback struct{ msg, reason string }

func (e *errRollback) Error() string { return e.msg }

func rollback(format string, a ...any) error { return &errRollback{msg: fmt.Sprintf(format, a...)} }

// rejected is a rollback with its failure code.
func rejected(reason, format string, a ...any) error {
	return &errRollback{msg: fmt.Sprintf(format, a...), reason: reason}
}

// RollbackReason is the failure code of a rollback ("" when it has none).
func RollbackReason(err error) string {
	var r *errRollback
	if errors.As(err, &r) {
		return r.reason
	}
	return ""
}

// IsRollback reports whether err is a business failure that rolled a
// transaction back (as opposed to a database error), and its message.
func IsRollback(err error) (string, bool) {
	var r *errRollback
	if errors.As(err, &r) {
		return r.msg, true
	}
	return "", false
}
