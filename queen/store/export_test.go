package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/combine"
)

// RetentionRuleSQL is a retention rule's statement, for the cost tests.
func RetentionRuleSQL(name string) string {
	for _, r := range retentionRules {
		if r.name == name {
			return r.sql()
		}
	}
	return ""
}

// KVGetPrefixSQL is the ranged prefix read, for the cost tests.
const KVGetPrefixSQL = kvGetPrefixSQL

// PrefixUpper is prefixUpper, for its property test.
var PrefixUpper = prefixUpper

// QueuePartitionsSQL is the queue list's counting statement, for the cost
// tests.
const QueuePartitionsSQL = queuePartitionsSQL

// WildcardPopSQL is the wildcard pop statement of one partition, for the
// cost tests.
var WildcardPopSQL = text("pop.one")

// PopStatements are the statements a pop of one partition can run: the
// lean one it runs and the general one, for the test that they agree.
func PopStatements(partition bool) (one, general string) {
	if partition {
		return text("pop.partition.one"), text("pop.partition")
	}
	return text("pop.one"), text("pop")
}

// PopManySQL is the statement of several one-partition wildcard pops, for
// the property that it is one pop each.
func PopManySQL() string { return text("pop.many") }

// AckCompletedSQL is the completions statement, for the HOT test.
const AckCompletedSQL = ackCompletedSQL

// AckCompletedIgnoringLeaseSQL is the completions statement as the
// ack-ignores-lease canary rewrites it (its ignore_lease true), for the
// property test that it does what the old statement's switch did.
var AckCompletedIgnoringLeaseSQL = substitute(ackCompletedSQL, statementVariants["ack.completed"], "ack-ignores-lease")

// QueueSummariesSQL is the lists' counting statement, for the cost tests.
const QueueSummariesSQL = queueSummariesSQL

// DLQQueuePageSQL is the one-queue DLQ page, for the cost tests.
const DLQQueuePageSQL = dlqQueuePageSQL

// RefreshQueueStatsSQL is the snapshot's refresh statement, for the cost
// tests.
const RefreshQueueStatsSQL = refreshQueueStatsSQL

// RefAckCompletedSQL is the combined completions statement as it stood
// before queen.ack_verdict, for the property test that the new agrees.
const RefAckCompletedSQL = refAckCompletedSQL

// AckReadSQL is the general ack batch's read, for the test that
// queen.ack_verdict is inlined.
const AckReadSQL = ackReadSQL

// TestWrites is what the store tests' Push runs through: the write policy
// (queen/writes' Policy), which the store cannot import.
type TestWrites interface {
	BuildRows(ctx context.Context, tenant string, items []PushItem, pids []string, producerSub string) ([]AppendRow, error)
	Append(ctx context.Context, q Executor, rows []AppendRow, lockWait string) ([]AppendOut, error)
}

// Push is the store tests' way to put messages in: what queen/pushpath does
// for one caller (its statements, through the write policy w), without the
// combiner and without the name cache; the combining and its retries are
// pushpath's, and the name cache and its stale retry queen/names', and
// tested there.
func (s *Store) Push(ctx context.Context, w TestWrites, tenant string, items []PushItem, producerSub string) ([]PushResult, error) {
	out := make([]PushResult, len(items))
	if len(items) == 0 {
		return out, nil
	}
	todo := make([]int, len(items))
	for i := range items {
		todo[i] = i
	}
	pids, err := s.partitionIDs(ctx, tenant, items)
	if err != nil {
		return nil, err
	}
	rows, err := w.BuildRows(ctx, tenant, items, pids, producerSub)
	if err != nil {
		return nil, err
	}
	var res []AppendOut
	// Alone, as pushpath runs a push it does not combine: a lock wait that
	// ran out is tried again within the bound. In a slot (false) it
	// returned at once, for a combiner to split, and the tests that push
	// while others hold the partition's rows failed with 55P03 whenever
	// the machine was slow.
	err = s.testRetry().Run(ctx, true, func(ctx context.Context) (err error) {
		res, err = w.Append(ctx, s.pool, rows, LockWait())
		return err
	})
	if err != nil {
		return nil, err
	}
	if _, err := PushAnswers(items, todo, rows, res, out); err != nil {
		return nil, err
	}
	return out, nil
}

// partitionIDs is Push's partition per item: queen/names' resolution
// (which the store cannot import) without its cache and stale checks:
// LookupPartitions, then the missing ones' queues, partitions and cursors
// created in one transaction, in name order, and LookupPartitions again.
func (s *Store) partitionIDs(ctx context.Context, tenant string, items []PushItem) ([]string, error) {
	type key struct{ q, p string }
	keys := make([]key, len(items))
	for i, it := range items {
		keys[i] = key{it.Queue, it.Partition}
		if keys[i].p == "" {
			keys[i].p = DefaultPartition
		}
	}
	ids := map[key]string{}
	lookup := func() error {
		p := LookupPartitionsParams{Tenant: tenant}
		for _, k := range keys {
			p.Queues, p.Partitions = append(p.Queues, k.q), append(p.Partitions, k.p)
		}
		found, err := s.LookupPartitions(ctx, s.pool, p)
		for _, r := range found {
			ids[key{r.Queue, r.Partition}] = r.ID
		}
		return err
	}
	if err := lookup(); err != nil {
		return nil, err
	}
	var missing []key
	for _, k := range keys {
		if _, ok := ids[k]; !ok {
			missing = append(missing, k)
		}
	}
	sort.Slice(missing, func(i, j int) bool {
		return missing[i].q < missing[j].q || missing[i].q == missing[j].q && missing[i].p < missing[j].p
	})
	d := DefaultQueueOptions()
	qp := CreateQueuesParams{Tenant: tenant, LeaseTime: d.LeaseTime, RetryLimit: d.RetryLimit, RetryDelay: d.RetryDelay,
		TTL: d.TTL, Now: s.dbNow()}
	pp := CreatePartitionsParams{Tenant: tenant, Now: s.dbNow()}
	for i, k := range missing {
		if i == 0 || missing[i-1].q != k.q {
			ns, task := SplitName(k.q)
			qp.IDs, qp.Names, qp.Namespaces, qp.Tasks = append(qp.IDs, s.ids.New()), append(qp.Names, k.q),
				append(qp.Namespaces, ns), append(qp.Tasks, task)
		}
		pp.IDs, pp.Queues, pp.Partitions = append(pp.IDs, s.ids.New()), append(pp.Queues, k.q), append(pp.Partitions, k.p)
	}
	if len(missing) > 0 {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := s.CreateQueues(ctx, tx, qp); err != nil {
				return err
			}
			created, err := s.CreatePartitions(ctx, tx, pp)
			cp := CreateConsumersParams{Tenant: tenant, Now: s.dbNow()}
			for _, c := range created {
				cp.PartitionIDs, cp.QueueIDs = append(cp.PartitionIDs, c.ID), append(cp.QueueIDs, c.QueueID)
			}
			if err != nil || len(created) == 0 {
				return err
			}
			return s.CreateConsumers(ctx, tx, cp)
		})
		if err != nil {
			return nil, err
		}
		if err := lookup(); err != nil {
			return nil, err
		}
	}
	pids := make([]string, len(items))
	for i, k := range keys {
		pids[i] = ids[k]
	}
	return pids, nil
}

// testRetry is the contention retry the broker wires into its paths
// (package queen's contentionRetry) over s, for the store tests' push and
// ack helpers: the store holds no retry, and its tests cannot import
// storetest.Retry (an import cycle).
func (s *Store) testRetry() combine.Retry {
	return combine.Retry{Bound: s.bound, Jitter: s.ids.Jitter, Contention: Contention, LockTimedOut: LockTimedOut,
		Wait: func(ctx context.Context, d time.Duration) { clock.Sleep(ctx, s.clock, d) }}
}

// Ack is the store tests' way to complete: what queen/consume's Ack does
// for one caller's completions (the statement), without the combiner; the
// combining and its retries are consume's, and tested there. A general
// batch (a failure, retry, DLQ move or an item twice) is consume's state
// machine, which the store cannot import: the store tests' ack helper
// (helpers_test.go) runs it through consume.AckInTx.
func (s *Store) Ack(ctx context.Context, tenant, group string, items []AckItem) ([]AckResult, error) {
	if !AllCompletedAndDistinct(items) {
		return nil, fmt.Errorf("store.Ack takes distinct completions only; a general ack batch is queen/consume's")
	}
	group = AckGroup(group)
	ctx, cancel := s.Bound(ctx)
	defer cancel()
	rows := make([]AckRow, len(items))
	for i, it := range items {
		rows[i] = AckRow{AckItem: it, Tenant: tenant, Group: group}
	}
	var out []AckResult
	err := s.testRetry().Run(ctx, false, func(ctx context.Context) (err error) {
		out, err = s.AckCompletions(ctx, rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Index = i
	}
	return out, nil
}

// SurfaceFunction is one of the SQL surface's statement functions.
type SurfaceFunction struct{ Signature, Returns, Volatility, Body string }

// SurfaceFunctions are the SQL surface's statement functions, for the test
// that they are the statements.
func SurfaceFunctions() []SurfaceFunction {
	out := make([]SurfaceFunction, len(surfaceFunctions))
	for i, f := range surfaceFunctions {
		out[i] = SurfaceFunction{f.signature, f.returns, f.volatility, f.body}
	}
	return out
}

// SurfaceStatements are the statements the SQL surface's functions must
// be, by function name: the constants themselves, not surfaceFunctions'
// copy of them.
var SurfaceStatements = map[string]string{"append_rows": appendSQL, "append_duplicates": dupLookupSQL}

// SurfaceMigration is the generated step for fns (surfaceFunctions when
// nil): its ledger key and its text, for the test that a database an
// older broker migrated gets this broker's functions.
func SurfaceMigration(fns []SurfaceFunction) (version, body string) {
	m := generatedMigration()
	if fns != nil {
		own := make([]surfaceFunction, len(fns))
		for i, f := range fns {
			own[i] = surfaceFunction{f.Signature, f.Returns, f.Volatility, f.Body}
		}
		m = generatedMigrationOf(own)
	}
	return m.version, m.body
}

// FindByTransactionSQL is the dashboard's transactionId look-up, for the
// cost tests.
const FindByTransactionSQL = findByTransactionSQL
