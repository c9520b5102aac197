package store

import (
	"context"
	"fmt"
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

// Push is the store tests' way to put messages in: what queen/pushpath does
// for one caller (its statements, through the store's write policy),
// without the combiner and without the name cache; the combining and its
// retries are pushpath's, and the name cache and its stale retry
// queen/names', and tested there.
func (s *Store) Push(ctx context.Context, tenant string, items []PushItem, producerSub string) ([]PushResult, error) {
	out := make([]PushResult, len(items))
	if len(items) == 0 {
		return out, nil
	}
	todo := make([]int, len(items))
	keys := make([]PartitionKey, len(items))
	for i, it := range items {
		todo[i] = i
		keys[i] = PartitionKey{Queue: it.Queue, Partition: it.Partition}
		if keys[i].Partition == "" {
			keys[i].Partition = DefaultPartition
		}
	}
	ids, err := s.ResolvePartitions(ctx, tenant, keys)
	if err != nil {
		return nil, err
	}
	pids := make([]string, len(items))
	for i, k := range keys {
		pids[i] = ids[k]
	}
	rows, err := s.BuildRows(ctx, tenant, items, pids, producerSub)
	if err != nil {
		return nil, err
	}
	var res []AppendOut
	// Alone, as pushpath runs a push it does not combine: a lock wait that
	// ran out is tried again within the bound. In a slot (false) it
	// returned at once, for a combiner to split, and the tests that push
	// while others hold the partition's rows failed with 55P03 whenever
	// the machine was slow.
	err = s.retry.Run(ctx, true, func(ctx context.Context) (err error) {
		res, err = s.writes.Append(ctx, s.pool, rows, LockWait())
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
	err := s.retry.Run(ctx, false, func(ctx context.Context) (err error) {
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
