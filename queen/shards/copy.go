package shards

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/queen/clock"
)

// DB is what the copy statements run on: a connection, a pool or a
// transaction (CreateSubscription's needs no transaction around it).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// QueueRows identifies one queue's rows on its shard, as the row filters
// of a move's publication select them.
type QueueRows struct {
	QueueID    string   // queen.queues.id
	Tenant     string   // the queue's tenant id
	Name       string   // the queue's name
	Partitions []string // every partition id of the queue, when the copy starts
}

// Table is a per-queue table and its row filter: a format() template over
// %1$L the queue id, %2$L the partition ids as a uuid[] literal, %3$L the
// tenant id and %4$L the queue name. Every column a filter names is in the
// table's replica identity (migration 023), else PostgreSQL 15 refuses
// every UPDATE and DELETE on the table while it is published.
type Table struct {
	Name, Filter string
}

// Row filters, by what identifies a table's rows of one queue.
const (
	byQueueID    = `queue_id = %1$L::uuid`
	byPartition  = `partition_id = ANY (%2$L::uuid[])`
	byQueueName  = `tenant_id = %3$L::uuid AND queue = %4$L`
	byQueueNameC = `tenant_id = %3$L::uuid AND queue_name = %4$L`
)

// PerQueueTables are the tables a queue's rows live in, in the order a
// move copies them. queen.message_trace_names is not among them: it has
// no queue column (only trace_id), so no row filter can select it; a move
// copies it apart, after the traces. queen_streams.queries is a tenant's,
// not a queue's: a shard keeps its own.
var PerQueueTables = []Table{
	{"queen.queues", `id = %1$L::uuid`},
	{"queen.partitions", byQueueID},
	{"queen.messages", byPartition},
	{"queen.partition_consumers", byPartition},
	{"queen.dead_letter_queue", byPartition},
	{"queen.dlq_counts", byPartition},
	{"queen.message_deletes", byPartition},
	{"queen.message_traces", byPartition},
	{"queen.retention_history", byQueueID},
	{"queen.pop_marks", byQueueID},
	{"queen.queue_stats", byQueueID},
	{"queen.stats_queue_minutes", byQueueID},
	{"queen.log_timers", byQueueName},
	{"queen.consumer_groups_metadata", byQueueNameC},
	{"queen.consumer_watermarks", byQueueNameC},
	{"queen_streams.state", byPartition},
}

// renderFiltersSQL renders each table's row filter for one queue, quoting
// by format(): $1 the templates, $2 the queue id, $3 the partitions, $4 the
// tenant, $5 the name.
const renderFiltersSQL = `SELECT array_agg(format(f, $2::uuid, $3::uuid[]::text, $4::uuid, $5::text) ORDER BY n)
FROM unnest($1::text[]) WITH ORDINALITY AS x(f, n)`

// Filters renders every PerQueueTables row filter for q, in order: the
// WHERE clause of a publication, and of a check that compares the rows.
func Filters(ctx context.Context, db DB, q QueueRows) ([]string, error) {
	tmpl := make([]string, len(PerQueueTables))
	for i, t := range PerQueueTables {
		tmpl[i] = t.Filter
	}
	parts := q.Partitions
	if parts == nil {
		parts = []string{}
	}
	var out []string
	if err := db.QueryRow(ctx, renderFiltersSQL, tmpl, q.QueueID, parts, q.Tenant, q.Name).Scan(&out); err != nil {
		return nil, fmt.Errorf("shards: render row filters: %w", err)
	}
	return out, nil
}

// publicationExistsSQL tells whether publication $1 exists.
const publicationExistsSQL = `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`

// createPublicationSQL is CREATE PUBLICATION with its name quoted by
// format(): $1 the name, $2 the tables, $3 their rendered filters. TRUNCATE
// is not published: it would replicate unfiltered.
const createPublicationSQL = `SELECT format('CREATE PUBLICATION %I FOR ', $1::text)
	|| string_agg(format('TABLE %s WHERE (%s)', t, f), ', ' ORDER BY n)
	|| ' WITH (publish = ''insert, update, delete'')'
FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS x(t, f, n)`

// CreatePublication publishes q's rows of every per-queue table on the
// source shard, under name (the move's, so a restarted step finds its
// own): a publication that exists already is left as it is. The partition
// list is fixed here: a partition the queue gains later is not copied, so
// the mover must hold partition creation of a moving queue (or start the
// copy again).
func CreatePublication(ctx context.Context, source DB, name string, q QueueRows) error {
	var exists bool
	if err := source.QueryRow(ctx, publicationExistsSQL, name).Scan(&exists); err != nil || exists {
		return wrap("publication exists", err)
	}
	filters, err := Filters(ctx, source, q)
	if err != nil {
		return err
	}
	tables := make([]string, len(PerQueueTables))
	for i, t := range PerQueueTables {
		tables[i] = t.Name
	}
	var stmt string
	if err := source.QueryRow(ctx, createPublicationSQL, name, tables, filters).Scan(&stmt); err != nil {
		return wrap("render publication", err)
	}
	_, err = source.Exec(ctx, stmt)
	return wrap("create publication", err)
}

// dropPublicationSQL renders the drop of publication $1, if it exists.
const dropPublicationSQL = `SELECT format('DROP PUBLICATION IF EXISTS %I', $1::text)`

// DropPublication drops the publication if it exists.
func DropPublication(ctx context.Context, source DB, name string) error {
	return execFormatted(ctx, source, dropPublicationSQL, "drop publication", name)
}

// subscriptionExistsSQL tells whether subscription $1 exists.
const subscriptionExistsSQL = `SELECT EXISTS (SELECT 1 FROM pg_subscription WHERE subname = $1)`

// createSubscriptionSQL renders CREATE SUBSCRIPTION: $1 its name (also its
// slot's on the source), $2 the source's connection string, $3 the
// publication. The initial copy takes the published rows as of the slot's
// snapshot; the changes after it follow.
const createSubscriptionSQL = `SELECT format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %I WITH (copy_data = true, create_slot = true, slot_name = %L)',
	$1::text, $2::text, $3::text, $1::text)`

// CreateSubscription subscribes the destination shard to the source's
// publication, creating the logical slot named name on the source. An
// existing subscription of that name is left as it is.
func CreateSubscription(ctx context.Context, dest DB, name, sourceConnInfo, publication string) error {
	var exists bool
	if err := dest.QueryRow(ctx, subscriptionExistsSQL, name).Scan(&exists); err != nil || exists {
		return wrap("subscription exists", err)
	}
	return execFormatted(ctx, dest, createSubscriptionSQL, "create subscription", name, sourceConnInfo, publication)
}

// createSlotSQL creates logical slot $1 for pgoutput on the source,
// unless it exists. A second mover racing past the check gets
// duplicate_object, which CreateSlot takes as done.
const createSlotSQL = `SELECT count(pg_create_logical_replication_slot($1, 'pgoutput'))
FROM (SELECT 1) AS one WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`

// CreateSlot creates the logical slot name on the source, for
// SubscribeToSlot; a slot that exists is left as it is. Created apart
// from the subscription because CREATE SUBSCRIPTION that creates its slot
// on a database of its own cluster waits forever: the slot's creation
// waits for every running transaction, its own included. Shards that are
// databases of one cluster (the simulator's, a small deployment) need it;
// shards on their own clusters take it the same way.
func CreateSlot(ctx context.Context, source DB, name string) error {
	var n int
	err := source.QueryRow(ctx, createSlotSQL, name).Scan(&n)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == pgerrcode.DuplicateObject {
		return nil
	}
	return wrap("create slot", err)
}

// subscribeToSlotSQL renders CREATE SUBSCRIPTION on an existing slot: $1
// its name (also the slot's), $2 the source's connection string, $3 the
// publication.
const subscribeToSlotSQL = `SELECT format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %I WITH (copy_data = true, create_slot = false, slot_name = %L)',
	$1::text, $2::text, $3::text, $1::text)`

// SubscribeToSlot subscribes the destination shard to the source's
// publication through the slot CreateSlot made (of the same name). The
// initial copy takes the published rows at each table's own snapshot; the
// changes the slot kept from before it are skipped per table up to that
// snapshot, so nothing is applied twice. An existing subscription of that
// name is left as it is.
func SubscribeToSlot(ctx context.Context, dest DB, name, sourceConnInfo, publication string) error {
	var exists bool
	if err := dest.QueryRow(ctx, subscriptionExistsSQL, name).Scan(&exists); err != nil || exists {
		return wrap("subscription exists", err)
	}
	return execFormatted(ctx, dest, subscribeToSlotSQL, "subscribe to slot", name, sourceConnInfo, publication)
}

// dropSubscriptionSQL renders the drop of subscription $1, if it exists.
const dropSubscriptionSQL = `SELECT format('DROP SUBSCRIPTION IF EXISTS %I', $1::text)`

// DropSubscription drops the destination's subscription and, through the
// source, its slot. When the source cannot be reached, use
// DetachSubscription and DropSlot instead.
func DropSubscription(ctx context.Context, dest DB, name string) error {
	return execFormatted(ctx, dest, dropSubscriptionSQL, "drop subscription", name)
}

// detachSubscriptionSQL renders, for an existing subscription $1, the
// statements that drop it and leave its slot on the source: disable,
// forget the slot, drop (each on its own: DROP SUBSCRIPTION refuses a
// transaction block).
const detachSubscriptionSQL = `SELECT coalesce(array_agg(format(stmt, $1::text) ORDER BY n), '{}')
FROM pg_subscription, unnest(ARRAY['ALTER SUBSCRIPTION %I DISABLE', 'ALTER SUBSCRIPTION %I SET (slot_name = NONE)',
	'DROP SUBSCRIPTION %I']) WITH ORDINALITY AS x(stmt, n)
WHERE subname = $1`

// DetachSubscription drops the destination's subscription without
// touching the source (a source down, or a move given up): the slot is
// left there, for DropSlot.
func DetachSubscription(ctx context.Context, dest DB, name string) error {
	var stmts []string
	if err := dest.QueryRow(ctx, detachSubscriptionSQL, name).Scan(&stmts); err != nil {
		return wrap("detach subscription", err)
	}
	for _, stmt := range stmts {
		if _, err := dest.Exec(ctx, stmt); err != nil {
			return wrap("detach subscription", err)
		}
	}
	return nil
}

// endSlotSenderSQL ends the walsender holding slot $1, if any: a slot
// left behind keeps every later WAL segment on the source, and an active
// one cannot be dropped.
const endSlotSenderSQL = `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`

// dropIdleSlotSQL drops slot $1 if it exists and nothing holds it.
const dropIdleSlotSQL = `SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`

// DropSlot drops the source's slot name, ending whatever walsender holds
// it (a stuck move's timeout, or a subscription detached without its
// source). A slot that does not exist is no error. A subscription still
// enabled reconnects at once, so detach it first: else this returns only
// when ctx ends.
func DropSlot(ctx context.Context, c clock.Clock, source DB, name string) error {
	for {
		if _, err := source.Exec(ctx, endSlotSenderSQL, name); err != nil {
			return wrap("end slot's walsender", err)
		}
		var left int
		err := source.QueryRow(ctx, slotLeftSQL, name).Scan(&left)
		if err != nil || left == 0 {
			return wrap("drop slot", err)
		}
		if _, err := source.Exec(ctx, dropIdleSlotSQL, name); err != nil && !isObjectInUse(err) {
			return wrap("drop slot", err)
		}
		if err := sleep(ctx, c, 20*time.Millisecond); err != nil {
			return wrap("drop slot", err)
		}
	}
}

// slotLeftSQL counts the slots named $1 (0 or 1).
const slotLeftSQL = `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`

// tablesReadySQL counts the subscription's tables, and those whose
// initial copy is not done yet (state other than r, ready).
const tablesReadySQL = `SELECT count(*), count(*) FILTER (WHERE r.srsubstate <> 'r')
FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = $1`

// currentLSNSQL is the source's WAL insert position: past every commit
// record so far. Not pg_current_wal_lsn(), the write position: under
// synchronous_commit=off a commit returns while its record still waits in
// the WAL buffers, before that position, and a wait for it returned with
// the commit not applied on the destination (seen in the e2e test).
const currentLSNSQL = `SELECT pg_current_wal_insert_lsn()::text`

// slotConfirmedSQL tells whether the subscriber confirmed slot $1 flushed
// (applied and made durable) up to $2.
const slotConfirmedSQL = `SELECT coalesce(bool_and(confirmed_flush_lsn >= $2::pg_lsn), false) FROM pg_replication_slots WHERE slot_name = $1`

// WaitCaughtUp waits until the subscription's initial copy is done and
// the destination has applied everything the source committed before the
// call: the source's WAL insert position, read once the tables are
// ready, is the mark, and the slot's confirmed_flush_lsn (what the subscriber reported
// applied and flushed) must pass it. It returns the mark. A freeze calls it
// after its fencing commit, so the mark lies past the freeze. An error of
// the subscription's workers ends the wait at once: they would retry it
// forever.
func WaitCaughtUp(ctx context.Context, c clock.Clock, source, dest DB, subscription, slot string, poll time.Duration) (string, error) {
	if err := waitTablesReady(ctx, c, dest, subscription, poll); err != nil {
		return "", err
	}
	var mark string
	if err := source.QueryRow(ctx, currentLSNSQL).Scan(&mark); err != nil {
		return "", wrap("source wal position", err)
	}
	for {
		var done bool
		if err := source.QueryRow(ctx, slotConfirmedSQL, slot, mark).Scan(&done); err != nil {
			return "", wrap("slot position", err)
		}
		if done {
			return mark, nil
		}
		if err := subscriptionErrors(ctx, dest, subscription); err != nil {
			return "", err
		}
		if err := sleep(ctx, c, poll); err != nil {
			return "", fmt.Errorf("shards: %s catching up to %s: %w", subscription, mark, err)
		}
	}
}

// waitTablesReady waits until every table of the subscription finished
// its initial copy.
func waitTablesReady(ctx context.Context, c clock.Clock, dest DB, subscription string, poll time.Duration) error {
	for {
		var total, pending int
		if err := dest.QueryRow(ctx, tablesReadySQL, subscription).Scan(&total, &pending); err != nil {
			return wrap("subscription tables", err)
		}
		if total > 0 && pending == 0 {
			return nil
		}
		if err := subscriptionErrors(ctx, dest, subscription); err != nil {
			return fmt.Errorf("%w; %d of %d tables not copied yet", err, pending, total)
		}
		if err := sleep(ctx, c, poll); err != nil {
			return fmt.Errorf("shards: initial copy of %s: %d of %d tables not ready: %w", subscription, pending, total, err)
		}
	}
}

// subscriptionErrorsSQL counts the errors of subscription $1's workers
// (a row that conflicts with one on the destination, a missing table):
// they retry forever, so the caller must see them.
const subscriptionErrorsSQL = `SELECT coalesce(sum(sync_error_count + apply_error_count), 0)::int8 FROM pg_stat_subscription_stats WHERE subname = $1`

// subscriptionErrors is an error when the subscription's workers failed.
func subscriptionErrors(ctx context.Context, dest DB, subscription string) error {
	var n int
	if err := dest.QueryRow(ctx, subscriptionErrorsSQL, subscription).Scan(&n); err != nil {
		return wrap("subscription errors", err)
	}
	if n > 0 {
		return fmt.Errorf("shards: %s: its workers failed %d times (see the destination's log)", subscription, n)
	}
	return nil
}

// execFormatted renders a statement with render (a SELECT format(...)
// over args) and runs it: identifiers and literals are quoted by
// PostgreSQL, never by hand.
func execFormatted(ctx context.Context, db DB, render, what string, args ...any) error {
	var stmt string
	if err := db.QueryRow(ctx, render, args...).Scan(&stmt); err != nil {
		return wrap(what, err)
	}
	_, err := db.Exec(ctx, stmt)
	return wrap(what, err)
}

func isObjectInUse(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgerrcode.ObjectInUse
}

// sleep waits d on c; it is ctx's error when ctx ended first.
func sleep(ctx context.Context, c clock.Clock, d time.Duration) error {
	clock.Sleep(ctx, c, d)
	return ctx.Err()
}

// wrap adds what failed to err; nil stays nil.
func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("shards: %s: %w", what, err)
}
