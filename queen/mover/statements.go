package mover

import (
	"context"
	"fmt"
	"strings"

	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/sqlargs"
)

// statement is one named statement: its text and its params struct.
type statement struct {
	text   string
	params any
}

// statements is the mover's own statements by name, for the test that
// holds each params struct to its text. The per-table counts and deletes
// are built from shards.PerQueueTables (constants) and the row filters
// PostgreSQL rendered (shards.Filters, quoted by format()): no input of a
// caller's is spliced.
var statements = map[string]statement{
	"lock":   {lockSQL, lockParams{}},
	"unlock": {unlockSQL, lockParams{}},
	"delete": {deleteBatchSQL, deleteParams{}},
}

// argsOf is a params struct as its statement's arguments.
var argsOf = sqlargs.Of

// moverLock is the catalogue's session advisory lock a mover holds while
// it runs steps: one mover per deployment. It differs from the
// catalogue's migration lock (737010) and the store's (737000 to 737003).
const moverLock = 737020

// lockSQL tries the mover's lock; it answers whether this session got it.
const lockSQL = `SELECT pg_try_advisory_lock($1)`

// unlockSQL releases it.
const unlockSQL = `SELECT pg_advisory_unlock($1)`

// lockParams are lockSQL's and unlockSQL's arguments.
type lockParams struct {
	Key int64
}

// deleteBatchSQL deletes at most $1 rows of one table that one filter
// selects: %[1]s the table, %[2]s the filter. A move deletes a queue's rows
// on a shard batch by batch (never TRUNCATE, which a publication would
// replicate unfiltered, and never one statement that holds every row
// lock of a big queue at once).
const deleteBatchSQL = `DELETE FROM %[1]s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %[1]s WHERE %[2]s LIMIT $1))`

// deleteParams are deleteBatchSQL's arguments.
type deleteParams struct {
	Limit int
}

// countRowsSQL renders the count of one table's rows a filter selects.
const countRowsSQL = `(SELECT count(*) FROM %s WHERE %s)`

// DB is what the mover's shard statements run on.
type DB = shards.DB

// queueRowsCount counts the queue's rows in every per-queue table of db.
func queueRowsCount(ctx context.Context, db DB, q shards.QueueRows) (int64, error) {
	filters, err := shards.Filters(ctx, db, q)
	if err != nil {
		return 0, err
	}
	parts := make([]string, len(filters))
	for i, f := range filters {
		parts[i] = fmt.Sprintf(countRowsSQL, shards.PerQueueTables[i].Name, f)
	}
	var n int64
	if err := db.QueryRow(ctx, `SELECT `+strings.Join(parts, " + ")).Scan(&n); err != nil {
		return 0, fmt.Errorf("mover: count the queue's rows: %w", err)
	}
	return n, nil
}

// deleteQueueRows deletes the queue's rows from every per-queue table of
// db, batch rows at a time, dependent tables first and the queue row last
// (whose foreign keys cascade to whatever is left), or, with tombstone,
// all but the queue row (PerQueueTables' first), which stays frozen. It
// answers how many rows it deleted.
func deleteQueueRows(ctx context.Context, db DB, q shards.QueueRows, batch int, tombstone bool) (int64, error) {
	filters, err := shards.Filters(ctx, db, q)
	if err != nil {
		return 0, err
	}
	last := 0
	if tombstone {
		last = 1
	}
	var total int64
	for i := len(filters) - 1; i >= last; i-- {
		stmt := fmt.Sprintf(deleteBatchSQL, shards.PerQueueTables[i].Name, filters[i])
		for {
			tag, err := db.Exec(ctx, stmt, argsOf(deleteParams{batch})...)
			if err != nil {
				return total, fmt.Errorf("mover: delete the queue's rows of %s: %w", shards.PerQueueTables[i].Name, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < int64(batch) {
				break
			}
		}
	}
	return total, nil
}
