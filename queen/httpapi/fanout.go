package httpapi

import (
	"cmp"
	"context"
	"errors"
	"math"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/queen-go/queen/queen/store"
)

// Reads across shards. A broker with shards answers the lists, sums and
// status of a tenant by asking every shard's plane (fanOut) and merging
// their answers here, so the handlers read one answer as before. Without
// shards each gatherer below is the one store call it always was: no
// goroutine, no merge, no extra allocation.
//
// A queue lives on one shard, but during a move its copy is on two, and
// after one its source keeps a tombstone (the frozen queue row). A queue
// found on several shards is counted from the shard its placement names
// (keepPlaced); the placement is looked up for those queues only.
//
// A shard failing during a fan-out fails the request (*shardError, 503
// naming the shard): a list missing a shard's queues would look complete.

// shardError is a shard that failed during a fan-out.
type shardError struct {
	shard string
	err   error
}

func (e *shardError) Error() string { return "shard " + e.shard + ": " + e.err.Error() }
func (e *shardError) Unwrap() error { return e.err }

// fanOut runs fn on every plane at once and answers their results in the
// shards' configured order. Without shards fn runs once, here, on the
// Server's own plane, and its error is answered as is. With shards the
// first shard failing (in that order) is a *shardError naming it; fn's on
// the other shards still run to their end (each store call is bounded).
func fanOut[T any](ctx context.Context, s *Server, fn func(context.Context, *plane) (T, error)) ([]T, error) {
	return eachShard(ctx, s.allPlanes(), fn)
}

// fanError answers a failed fan-out: a shard that failed is 503 naming
// it; anything else (without shards, every failure) is storeError's.
func (s *Server) fanError(w http.ResponseWriter, r *http.Request, op string, err error) {
	var se *shardError
	if !errors.As(err, &se) {
		var pe *placementError
		if errors.As(err, &pe) {
			s.placementFailed(w, r, err)
			return
		}
		s.storeError(w, r, op, err)
		return
	}
	if r.Context().Err() != nil {
		return
	}
	s.stats.dbErrors.Add(1)
	s.rec.DBError(s.clock.Now())
	s.log.Warn("shard unavailable", "op", op, "shard", se.shard, "err", se.err)
	writeJSON(w, http.StatusServiceUnavailable, shardDown{Error: "shard " + se.shard + " unavailable: " + op + ": " + se.err.Error(), Shard: se.shard})
}

// shardDown is the body of a read that a shard failed.
type shardDown struct {
	Error string `json:"error"`
	Shard string `json:"shard"`
}

// tenantQueue names a queue across tenants (the metrics list them all).
type tenantQueue struct{ tenant, queue string }

// keepPlaced drops, from per (one list per shard, in the router's order),
// the rows of a queue found on several shards that are not on the shard
// its placement names (or, when it names none of them, on the first of
// them). key is a row's queue. Rows of a queue found on one shard are
// kept without a lookup.
func keepPlaced[T any](ctx context.Context, s *Server, per [][]T, key func(T) tenantQueue) ([][]T, error) {
	if len(per) < 2 {
		return per, nil
	}
	on := map[tenantQueue][]int{} // the shards holding each queue
	for i, rows := range per {
		for _, row := range rows {
			if k := key(row); !slices.Contains(on[k], i) {
				on[k] = append(on[k], i)
			}
		}
	}
	keep := map[tenantQueue]int{} // the queues on several shards: the shard kept
	for k, shards := range on {
		if len(shards) < 2 {
			continue
		}
		pl, _, err := s.router.find(ctx, k.tenant, "", k.queue, false)
		if err != nil {
			return nil, err
		}
		keep[k] = shards[0]
		if i := slices.Index(s.router.order, pl); slices.Contains(shards, i) {
			keep[k] = i
		}
	}
	if len(keep) == 0 {
		return per, nil
	}
	out := make([][]T, len(per))
	for i, rows := range per {
		for _, row := range rows {
			if j, several := keep[key(row)]; !several || j == i {
				out[i] = append(out[i], row)
			}
		}
	}
	return out, nil
}

// queuePage is a page of the tenant's queues with their counts, newest
// first (created_at, then id, as store.ListQueuesPage orders them). With
// shards each shard is asked for its first offset+limit queue rows, the
// lists merged in that order and the page cut from the merge; then each
// shard counts its queues of the page, and only those. The page is exact:
// each of its queues is among the first offset+limit of its shard. A
// queue on two shards (a move's copy or tombstone) has one id and creation
// time on both, so when one copy is in the page the other is read too,
// and keepPlaced drops it.
func (s *Server) queuePage(ctx context.Context, tenant string, f store.QueueFilter) ([]store.QueueInfo, error) {
	if s.router == nil {
		return s.store.ListQueuesPage(ctx, tenant, f)
	}
	ask := store.QueueFilter{Namespace: f.Namespace, Task: f.Task, Name: f.Name, Limit: f.Offset + f.Limit}
	if f.Limit == 0 || f.Limit > math.MaxInt-f.Offset {
		ask.Limit = 0 // every queue (a limit past the int range is one too)
	}
	per, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) ([]shardQueue, error) {
		qs, err := pl.store.QueueRows(ctx, tenant, ask)
		out := make([]shardQueue, len(qs))
		for i, q := range qs {
			out[i] = shardQueue{q, pl}
		}
		return out, err
	})
	if err != nil {
		return nil, err
	}
	if per, err = keepPlaced(ctx, s, per, func(q shardQueue) tenantQueue { return tenantQueue{q.Tenant, q.Name} }); err != nil {
		return nil, err
	}
	merged := slices.Concat(per...)
	slices.SortStableFunc(merged, func(a, b shardQueue) int { return newerQueue(a.Queue, b.Queue) })
	return s.countQueues(ctx, pageOf(merged, f.Offset, f.Limit))
}

// shardQueue is a queue and the plane it was read on.
type shardQueue struct {
	store.Queue
	on *plane
}

// countQueues counts the queues of page, each on its shard, in page's
// order.
func (s *Server) countQueues(ctx context.Context, page []shardQueue) ([]store.QueueInfo, error) {
	byShard := map[*plane][]store.Queue{}
	for _, q := range page {
		byShard[q.on] = append(byShard[q.on], q.Queue)
	}
	per, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) ([]store.QueueInfo, error) {
		if len(byShard[pl]) == 0 {
			return nil, nil
		}
		return pl.store.CountQueues(ctx, byShard[pl])
	})
	if err != nil {
		return nil, err
	}
	counted := map[*plane][]store.QueueInfo{}
	for i, infos := range per {
		counted[s.router.order[i]] = infos
	}
	out := make([]store.QueueInfo, len(page))
	for i, q := range page {
		out[i], counted[q.on] = counted[q.on][0], counted[q.on][1:]
	}
	return out, nil
}

// queueInfoKey is q's queue.
func queueInfoKey(q store.QueueInfo) tenantQueue { return tenantQueue{q.Tenant, q.Name} }

// newerQueue orders queues newest first, as the queue lists do.
func newerQueue(a, b store.Queue) int {
	if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
		return c
	}
	return cmp.Compare(b.ID, a.ID) // a uuid's text orders as its bytes
}

// mergeQueues merges per's lists newest first.
func mergeQueues(per [][]store.QueueInfo) []store.QueueInfo {
	merged := slices.Concat(per...)
	slices.SortStableFunc(merged, func(a, b store.QueueInfo) int { return newerQueue(a.Queue, b.Queue) })
	return merged
}

// pageOf is rows[offset:offset+limit], clamped; limit 0 is the rest.
func pageOf[T any](rows []T, offset, limit int) []T {
	rows = rows[min(offset, len(rows)):]
	if limit > 0 {
		rows = rows[:min(limit, len(rows))]
	}
	return rows
}

// snapshotQueues is the tenant's queue statistics (store.SnapshotQueues).
// With shards the queues of every shard, newest first, each queue once
// (keepPlaced); leases and dead letters summed over the shards; the
// oldest refresh the oldest of any shard.
func (s *Server) snapshotQueues(ctx context.Context, tenant string, f store.QueueFilter) (store.QueueStats, error) {
	if s.router == nil {
		return s.store.SnapshotQueues(ctx, tenant, f)
	}
	snaps, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) (store.QueueStats, error) {
		return pl.store.SnapshotQueues(ctx, tenant, f)
	})
	if err != nil {
		return store.QueueStats{}, err
	}
	per := make([][]store.QueueInfo, len(snaps))
	var out store.QueueStats
	for i, sn := range snaps {
		per[i] = sn.Queues
		out.Leases = store.LeaseStats{Active: out.Leases.Active + sn.Leases.Active, Partitions: out.Leases.Partitions + sn.Leases.Partitions,
			BatchSize: out.Leases.BatchSize + sn.Leases.BatchSize, Acked: out.Leases.Acked + sn.Leases.Acked}
		out.DLQ = store.DLQStats{Total: out.DLQ.Total + sn.DLQ.Total, Partitions: out.DLQ.Partitions + sn.DLQ.Partitions}
		if !sn.Oldest.IsZero() && (out.Oldest.IsZero() || sn.Oldest.Before(out.Oldest)) {
			out.Oldest = sn.Oldest
		}
	}
	if per, err = keepPlaced(ctx, s, per, queueInfoKey); err != nil {
		return store.QueueStats{}, err
	}
	out.Queues = mergeQueues(per)
	return out, nil
}

// topDeadLetterErrors are the commonest dead-letter errors. With shards,
// each shard's five commonest among its newest dead letters, counts of one
// error added, the five commonest of those (ties by error, as the store
// orders them).
func (s *Server) topDeadLetterErrors(ctx context.Context, tenant string) ([]store.ErrorCount, error) {
	if s.router == nil {
		return s.store.TopDeadLetterErrors(ctx, tenant)
	}
	per, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) ([]store.ErrorCount, error) {
		return pl.store.TopDeadLetterErrors(ctx, tenant)
	})
	if err != nil {
		return nil, err
	}
	return mergeTopErrors(per), nil
}

// mergeTopErrors adds up the counts of each error of per and answers the
// topErrors commonest, ties by error.
func mergeTopErrors(per [][]store.ErrorCount) []store.ErrorCount {
	by := map[string]int64{}
	var out []store.ErrorCount
	for _, es := range per {
		for _, e := range es {
			if _, ok := by[e.Error]; !ok {
				out = append(out, store.ErrorCount{Error: e.Error})
			}
			by[e.Error] += e.Count
		}
	}
	for i := range out {
		out[i].Count = by[out[i].Error]
	}
	slices.SortFunc(out, func(a, b store.ErrorCount) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Error, b.Error)
	})
	return out[:min(len(out), topErrors)]
}

// topErrors is how many errors status lists (store.TopDeadLetterErrors').
const topErrors = 5

// queueBucketsOf are the recorded queue minutes of f. With shards every
// shard's (each records the queues it serves); callers sum them by time.
func (s *Server) queueBucketsOf(ctx context.Context, f store.StatsFilter) ([]store.QueueBucket, error) {
	if s.router == nil {
		return s.store.QueueBuckets(ctx, f)
	}
	per, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) ([]store.QueueBucket, error) {
		return pl.store.QueueBuckets(ctx, f)
	})
	return slices.Concat(per...), err
}

// overviewOf is the tenant's overview (store.Overview). With shards the
// counts are summed and the lag spreads merged (mergeSpreads); the queues,
// namespaces and tasks are counted from the queues listed once each
// (snapshotQueues), so a move's tombstone is not a queue.
func (s *Server) overviewOf(ctx context.Context, tenant string) (store.Overview, error) {
	if s.router == nil {
		return s.store.Overview(ctx, tenant)
	}
	per, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) (store.Overview, error) {
		return pl.store.Overview(ctx, tenant)
	})
	if err != nil {
		return store.Overview{}, err
	}
	var o store.Overview
	var secs, msgs []store.Spread
	for _, p := range per {
		o.Partitions, o.Messages = o.Partitions+p.Partitions, o.Messages+p.Messages
		o.Pending, o.Processing, o.ActiveLeases = o.Pending+p.Pending, o.Processing+p.Processing, o.ActiveLeases+p.ActiveLeases
		o.DLQ, o.QueueDLQ = o.DLQ+p.DLQ, o.QueueDLQ+p.QueueDLQ
		secs, msgs = append(secs, p.LagSeconds), append(msgs, p.LagOffset)
	}
	o.LagSeconds, o.LagOffset = mergeSpreads(secs), mergeSpreads(msgs)
	snap, err := s.snapshotQueues(ctx, tenant, store.QueueFilter{})
	if err != nil {
		return store.Overview{}, err
	}
	o.Queues = int64(len(snap.Queues))
	for _, q := range snap.Queues {
		if q.Namespace != "" {
			o.Namespaces = append(o.Namespaces, q.Namespace)
		}
		if q.Task != "" {
			o.Tasks = append(o.Tasks, q.Task)
		}
	}
	slices.Sort(o.Namespaces)
	slices.Sort(o.Tasks)
	o.Namespaces, o.Tasks = slices.Compact(o.Namespaces), slices.Compact(o.Tasks)
	return o, nil
}

// mergeSpreads is the spread of the union of the sets spread: its size,
// minimum, maximum and average exact; its median the sets' medians
// averaged by their sizes (exact when one set is not empty; a median
// cannot be merged without the values).
func mergeSpreads(sp []store.Spread) store.Spread {
	var out store.Spread
	var sum, medians float64
	for _, v := range sp {
		if v.N == 0 {
			continue
		}
		if out.N == 0 {
			out.Min, out.Max = v.Min, v.Max
		}
		out.N, out.Min, out.Max = out.N+v.N, min(out.Min, v.Min), max(out.Max, v.Max)
		sum, medians = sum+v.Avg*float64(v.N), medians+v.Median*float64(v.N)
	}
	if out.N > 0 {
		out.Avg, out.Median = sum/float64(out.N), medians/float64(out.N)
	}
	return out
}

// listGroupsOf are the tenant's (group, queue) pairs (store.ListGroups),
// by group then queue. With shards every shard's: a group may consume
// queues on several shards, and a queue's pair comes from its shard.
func (s *Server) listGroupsOf(ctx context.Context, tenant string) ([]store.GroupSummary, error) {
	if s.router == nil {
		return s.store.ListGroups(ctx, tenant)
	}
	per, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) ([]store.GroupSummary, error) {
		return pl.store.ListGroups(ctx, tenant)
	})
	if err != nil {
		return nil, err
	}
	if per, err = keepPlaced(ctx, s, per, func(g store.GroupSummary) tenantQueue { return tenantQueue{tenant, g.Queue} }); err != nil {
		return nil, err
	}
	out := slices.Concat(per...)
	slices.SortStableFunc(out, func(a, b store.GroupSummary) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Queue, b.Queue))
	})
	return out, nil
}

// groupCursorRow is one cursor of store.GroupPartitions with its group.
type groupCursorRow struct {
	group string
	store.GroupPartition
}

// groupPartitionsOf are the cursors of group (every group when nil),
// keyed by group (store.GroupPartitions), by queue then partition. With
// shards every shard's, a queue's from its shard.
func (s *Server) groupPartitionsOf(ctx context.Context, tenant string, group *string) (map[string][]store.GroupPartition, error) {
	if s.router == nil {
		return s.store.GroupPartitions(ctx, tenant, group)
	}
	per, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) ([]groupCursorRow, error) {
		by, err := pl.store.GroupPartitions(ctx, tenant, group)
		var rows []groupCursorRow
		for g, ps := range by {
			for _, p := range ps {
				rows = append(rows, groupCursorRow{g, p})
			}
		}
		return rows, err
	})
	if err != nil {
		return nil, err
	}
	if per, err = keepPlaced(ctx, s, per, func(c groupCursorRow) tenantQueue { return tenantQueue{tenant, c.Queue} }); err != nil {
		return nil, err
	}
	out := map[string][]store.GroupPartition{}
	for _, rows := range per {
		for _, c := range rows {
			out[c.group] = append(out[c.group], c.GroupPartition)
		}
	}
	for _, ps := range out {
		slices.SortStableFunc(ps, func(a, b store.GroupPartition) int {
			return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Partition, b.Partition))
		})
	}
	return out, nil
}

// queueDepthsOf are every tenant's queues with their depth and dead
// letters (store.QueueDepths), by tenant then queue. With shards every
// shard's, a queue's from its shard.
func (s *Server) queueDepthsOf(ctx context.Context) ([]store.QueueDepth, error) {
	if s.router == nil {
		return s.store.QueueDepths(ctx)
	}
	per, err := fanOut(ctx, s, func(ctx context.Context, pl *plane) ([]store.QueueDepth, error) {
		return pl.store.QueueDepths(ctx)
	})
	if err != nil {
		return nil, err
	}
	if per, err = keepPlaced(ctx, s, per, func(d store.QueueDepth) tenantQueue { return tenantQueue{d.Tenant, d.Queue} }); err != nil {
		return nil, err
	}
	out := slices.Concat(per...)
	slices.SortStableFunc(out, func(a, b store.QueueDepth) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Queue, b.Queue))
	})
	return out, nil
}

// poolFigures are database connection figures of /metrics.
type poolFigures struct {
	size, idle, acquired int32
	emptyAcquires        int64
}

// poolFiguresOf are pl's pool's figures.
func poolFiguresOf(pl *plane) poolFigures {
	st := pl.store.Pool().Stat()
	return poolFigures{size: st.MaxConns(), idle: st.IdleConns(), acquired: st.AcquiredConns(), emptyAcquires: st.EmptyAcquireCount()}
}

// pools are the broker's pool figures: with shards summed over every
// shard's pool (each shard has its own DB_POOL_SIZE).
func (s *Server) pools() poolFigures {
	if s.router == nil {
		return poolFiguresOf(&s.plane)
	}
	var sum poolFigures
	for _, pl := range s.router.order {
		f := poolFiguresOf(pl)
		sum = poolFigures{sum.size + f.size, sum.idle + f.idle, sum.acquired + f.acquired, sum.emptyAcquires + f.emptyAcquires}
	}
	return sum
}

// poolMetrics registers the database pool's series: without shards
// unlabelled, as always; with shards one series per shard, labelled shard
// (each shard has its own pool of DB_POOL_SIZE, and its own refusals as a
// standby; sum() gives the broker's).
func (s *Server) poolMetrics(reg *prometheus.Registry) {
	pls := []*plane{&s.plane}
	if s.router != nil {
		pls = s.router.order
	}
	for _, pl := range pls {
		var shard prometheus.Labels
		if s.router != nil {
			shard = prometheus.Labels{"shard": pl.shard}
		}
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "queen_database_read_only_refusals_total",
			Help: "Statements a read-only server refused (SQLSTATE 25006); each closed its connection.", ConstLabels: shard},
			func() float64 { return float64(pl.store.ReadOnlyWatch().Refused()) }))
		for _, g := range []struct {
			name, help string
			f          func(poolFigures) int32
		}{
			{"queen_db_pool_size", "Maximum database connections.", func(f poolFigures) int32 { return f.size }},
			{"queen_db_pool_idle", "Idle database connections.", func(f poolFigures) int32 { return f.idle }},
			{"queen_db_pool_active", "Database connections in use.", func(f poolFigures) int32 { return f.acquired }},
		} {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help, ConstLabels: shard},
				func() float64 { return float64(g.f(poolFiguresOf(pl))) }))
		}
	}
}
