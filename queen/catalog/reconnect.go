package catalog

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// reconnecting is the catalogue's pool as Catalog uses it: a single-row
// statement that failed because its pooled connection had died (the
// catalogue restarted, failed over, or an operator ended the session) is
// run once more, on another connection. Without it, the first request
// after a catalogue restart meets the pool's dead connection and fails
// (TestShardsServeCachedQueuesWithTheCatalogueDown, whose catalogue comes
// back while the mover's runner reconnects). It runs again only what did
// not commit: a statement never sent, or one the server refused or
// aborted with an error of its own; a connection lost after sending (an
// EOF, an unknown outcome) is not retried.
type reconnecting struct{ DB }

// QueryRow runs the statement, and again after a dead connection.
func (r reconnecting) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return retryRow{db: r.DB, ctx: ctx, sql: sql, args: args}
}

// retryRow is a row read when scanned, once more after a dead connection.
type retryRow struct {
	db   DB
	ctx  context.Context
	sql  string
	args []any
}

func (r retryRow) Scan(dest ...any) error {
	err := r.db.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
	if deadConnection(err) && r.ctx.Err() == nil {
		err = r.db.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
	}
	return err
}

// deadConnection reports whether err says the connection was gone before
// the statement could run: nothing sent, or the server ending the session
// (class 57P: admin shutdown, crash shutdown, cannot connect now), or a
// connection exception (class 08).
func deadConnection(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57P") || strings.HasPrefix(pgErr.Code, "08")
	}
	return pgconn.SafeToRetry(err)
}
