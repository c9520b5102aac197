package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/queen-go/queen/queen/store"
)

// Reads across shards (the DLQ, message and trace lists). A list is
// sorted by a key every shard sorts by too, so its page is exact when
// each shard is asked for its first offset+limit rows, the answers merged
// in that order (ties in shard order, so the page is the same on every
// read) and [offset, offset+limit) sliced: a row of the page is among its
// own shard's first offset+limit. Totals are summed. A shard that fails
// fails the request, 503 naming it: a list missing a shard is never
// answered. Without shards the one plane is read as before, with no merge.

// fanWindow bounds offset+limit of a list merged across shards: each
// shard sends that many rows, so a deeper page answers 400 rather than
// making the broker hold shards x offset rows. A list filtered to one
// queue reads that queue's shard only and is not bounded by it.
const fanWindow = 10000

// allPlanes are the planes a list reads: the Server's own without
// shards, else every shard's in configured order.
func (s *Server) allPlanes() []*plane {
	if s.router == nil {
		return []*plane{&s.plane}
	}
	return s.router.order
}

// eachShard runs read on every one of planes at once and answers their
// results in that order. A failure is the first failing shard's, as a
// *shardError with several planes (the store's own error with one).
func eachShard[T any](ctx context.Context, planes []*plane, read func(context.Context, *plane) (T, error)) ([]T, error) {
	if len(planes) == 1 {
		v, err := read(ctx, planes[0])
		return []T{v}, err
	}
	out := make([]T, len(planes))
	errs := make([]error, len(planes))
	var wg sync.WaitGroup
	for i, pl := range planes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = read(ctx, pl)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, &shardError{shard: planes[i].shard, err: err}
		}
	}
	return out, nil
}

// mergePage merges pages, each sorted by order, into one sorted the same
// way (ties in plane order), and slices [offset, offset+limit). One page
// (no shards) was read at offset already and is answered as it is.
func mergePage[T any](pages [][]T, order func(a, b T) int, offset, limit int) []T {
	if len(pages) == 1 {
		return pages[0]
	}
	all := slices.Concat(pages...)
	slices.SortStableFunc(all, order)
	if offset >= len(all) {
		return all[:0]
	}
	return all[offset:min(len(all), offset+limit)]
}

// shardWindow is the offset and limit each of planes is asked for a page
// at offset of limit rows: the page itself from one plane, else the first
// offset+limit rows. ok is false (400 answered) past fanWindow.
func shardWindow(w http.ResponseWriter, planes []*plane, offset, limit int) (int, int, bool) {
	if len(planes) == 1 {
		return offset, limit, true
	}
	if offset+limit > fanWindow {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("offset: offset+limit must be at most %d with shards (filter by queue to read one shard)", fanWindow))
		return 0, 0, false
	}
	return 0, offset + limit, true
}

// listPlanes are the planes a list filtered to queue (none: "") reads:
// the queue's shard alone, else every plane.
func (s *Server) listPlanes(ctx context.Context, tenant, queue string) ([]*plane, error) {
	if queue == "" || s.router == nil {
		return s.allPlanes(), nil
	}
	pl, err := s.planeFor(ctx, tenant, "", queue, false)
	if err != nil {
		return nil, err
	}
	return []*plane{pl}, nil
}

// The orders below compare the time alone: rows a shard ties on it stay
// in that shard's own order (its ids, as its database sorts them), so
// each shard's first rows are its first in the merge too.

// newestFirst orders message rows as every shard lists them: newest
// first.
func newestFirst(a, b store.MessageRow) int {
	return b.CreatedAt.Compare(a.CreatedAt)
}

// latestFailureFirst orders dead letters as every shard lists them: newest
// failure first.
func latestFailureFirst(a, b store.DLQEntry) int {
	return b.FailedAt.Compare(a.FailedAt)
}

// oldestTraceFirst orders traces as every shard lists a name's: oldest
// first.
func oldestTraceFirst(a, b store.Trace) int {
	return a.CreatedAt.Compare(b.CreatedAt)
}

// partitionPlane is the plane holding partition pid (the default one when
// none does, whose answer is then today's "not found"), and the epoch of
// its queue's placement (0 without shards). Without shards it is the
// Server's own, with no lookup.
func (s *Server) partitionPlane(ctx context.Context, tenant, pid string) (*plane, partitionAt, error) {
	if s.router == nil {
		return &s.plane, partitionAt{}, nil
	}
	pl, at, err := s.router.locate(ctx, tenant, []string{pid})
	if err != nil {
		return nil, partitionAt{}, err
	}
	return pl, at[pid], nil
}

// dlqAcross is the page f asks for and the total: from the queue's shard
// when f names one, else merged across every shard (fanout_reads.go).
// ok is false when it answered a failure.
func (s *Server) dlqAcross(w http.ResponseWriter, r *http.Request, f store.DLQFilter) ([]store.DLQEntry, int64, bool) {
	planes, err := s.listPlanes(r.Context(), f.Tenant, f.Queue)
	if err != nil {
		s.placementFailed(w, r, err)
		return nil, 0, false
	}
	at := f
	var ok bool
	if at.Offset, at.Limit, ok = shardWindow(w, planes, f.Offset, f.Limit); !ok {
		return nil, 0, false
	}
	type page struct {
		entries []store.DLQEntry
		total   int64
	}
	pages, err := eachShard(r.Context(), planes, func(ctx context.Context, pl *plane) (page, error) {
		entries, total, err := pl.store.ListDLQ(ctx, at)
		return page{entries, total}, err
	})
	if err != nil {
		s.fanError(w, r, "list dlq", err)
		return nil, 0, false
	}
	lists := make([][]store.DLQEntry, len(pages))
	var total int64
	for i, p := range pages {
		lists[i], total = p.entries, total+p.total
	}
	return mergePage(lists, latestFailureFirst, f.Offset, f.Limit), total, true
}

// messagesAcross is GET /api/v1/messages's page and consumption mode: from
// the queue's shard when f names one (or without shards), else merged
// across every shard, a named group counted once however many shards it
// reads on. ok is false when it answered a failure.
func (s *Server) messagesAcross(w http.ResponseWriter, r *http.Request, f store.MessageFilter) ([]store.MessageRow, bool, int, bool) {
	ctx := r.Context()
	planes, err := s.listPlanes(ctx, f.Tenant, f.Queue)
	if err != nil {
		s.placementFailed(w, r, err)
		return nil, false, 0, false
	}
	if len(planes) == 1 {
		return s.messagesOn(w, r, planes[0], f)
	}
	at := f
	var ok bool
	if at.Offset, at.Limit, ok = shardWindow(w, planes, f.Offset, f.Limit); !ok {
		return nil, false, 0, false
	}
	type page struct {
		rows   []store.MessageRow
		hasQM  bool
		groups []string
	}
	pages, err := eachShard(ctx, planes, func(ctx context.Context, pl *plane) (page, error) {
		rows, err := pl.store.ListMessages(ctx, at)
		if err != nil {
			return page{}, err
		}
		hasQM, groups, err := pl.store.ConsumptionGroups(ctx, f.Tenant, f.Queue)
		return page{rows, hasQM, groups}, err
	})
	if err != nil {
		s.fanError(w, r, "messages", err)
		return nil, false, 0, false
	}
	lists := make([][]store.MessageRow, len(pages))
	var hasQM bool
	groups := map[string]bool{}
	for i, p := range pages {
		lists[i], hasQM = p.rows, hasQM || p.hasQM
		for _, g := range p.groups {
			groups[g] = true
		}
	}
	return mergePage(lists, newestFirst, f.Offset, f.Limit), hasQM, len(groups), true
}

// messagesOn is messagesAcross on one plane, as without shards.
func (s *Server) messagesOn(w http.ResponseWriter, r *http.Request, pl *plane, f store.MessageFilter) ([]store.MessageRow, bool, int, bool) {
	rows, err := pl.store.ListMessages(r.Context(), f)
	if err != nil {
		s.storeError(w, r, "messages", err)
		return nil, false, 0, false
	}
	hasQM, bus, err := pl.store.ConsumptionMode(r.Context(), f.Tenant, f.Queue)
	if err != nil {
		s.storeError(w, r, "messages", err)
		return nil, false, 0, false
	}
	return rows, hasQM, bus, true
}

// findAcross is GET /api/v1/messages/by-transaction's rows: from the
// queue's shard when one is named, else each shard's newest limit merged
// and cut to limit.
func (s *Server) findAcross(w http.ResponseWriter, r *http.Request, queue, txid string, limit int) ([]store.MessageRow, bool) {
	tenant := tenantOf(r)
	planes, err := s.listPlanes(r.Context(), tenant, queue)
	if err != nil {
		s.placementFailed(w, r, err)
		return nil, false
	}
	pages, err := eachShard(r.Context(), planes, func(ctx context.Context, pl *plane) ([]store.MessageRow, error) {
		return pl.store.FindByTransaction(ctx, tenant, queue, txid, limit)
	})
	if err != nil {
		s.fanError(w, r, "find transactionId", err)
		return nil, false
	}
	return mergePage(pages, newestFirst, 0, limit), true
}

// partitionRouted runs write on the plane holding partition pid, at the
// epoch of its queue's placement (0 without shards), and when the queue
// moved routes it again once, as ackRouted does: a write still moved is a
// *movingError, a route that cannot be told a *routeFailure.
func (s *Server) partitionRouted(ctx context.Context, tenant, pid string, write func(*plane, int64) error) error {
	pl, at, err := s.partitionPlane(ctx, tenant, pid)
	if err != nil {
		return &routeFailure{err}
	}
	err = write(pl, at.Epoch)
	if !s.movedOnce(err, tenant, func() []string { return []string{at.queue} }) {
		return err
	}
	prev, was := at, pl
	if pl, at, err = s.partitionPlane(ctx, tenant, pid); err != nil {
		return &routeFailure{err}
	}
	if pl == was && at.Epoch == prev.Epoch {
		return &movingError{queue: at.queue}
	}
	return stillMoving(write(pl, at.Epoch), at.queue)
}

// retryRouted retries a dead letter on the shard holding its partition,
// its append carrying the epoch of the partition's queue.
func (s *Server) retryRouted(ctx context.Context, tenant, pid, txid string) (res store.Retried, err error) {
	err = s.partitionRouted(ctx, tenant, pid, func(pl *plane, epoch int64) error {
		res, err = pl.pushes.RetryMessage(ctx, tenant, pid, txid, epoch)
		return err
	})
	return res, err
}

// tracesByNameAcross is a page of one name's traces, oldest first, and
// their total: merged across every shard.
func (s *Server) tracesByNameAcross(w http.ResponseWriter, r *http.Request, name string, limit, offset int) ([]store.Trace, int64, bool) {
	tenant, planes := tenantOf(r), s.allPlanes()
	at, window, ok := shardWindow(w, planes, offset, limit)
	if !ok {
		return nil, 0, false
	}
	type page struct {
		traces []store.Trace
		total  int64
	}
	pages, err := eachShard(r.Context(), planes, func(ctx context.Context, pl *plane) (page, error) {
		ts, total, err := pl.store.TracesByName(ctx, tenant, name, window, at)
		return page{ts, total}, err
	})
	if err != nil {
		s.fanError(w, r, "traces", err)
		return nil, 0, false
	}
	lists := make([][]store.Trace, len(pages))
	var total int64
	for i, p := range pages {
		lists[i], total = p.traces, total+p.total
	}
	return mergePage(lists, oldestTraceFirst, offset, limit), total, true
}

// traceNamesAcross is a page of the tenant's trace names, most recently
// seen first, and their total, merged across every shard: each shard's
// first offset+limit names, a name on several shards kept at its place on
// the first shard where it was seen last (so the merge keeps every
// shard's order, ties on the name included, which its collation sorts),
// sliced; then the page's names counted on every shard and summed. The
// total counts a name once per shard it is on.
func (s *Server) traceNamesAcross(w http.ResponseWriter, r *http.Request, limit, offset int) ([]store.TraceName, int64, bool) {
	tenant, planes := tenantOf(r), s.allPlanes()
	at, window, ok := shardWindow(w, planes, offset, limit)
	if !ok {
		return nil, 0, false
	}
	type page struct {
		names []store.TraceName
		total int64
	}
	pages, err := eachShard(r.Context(), planes, func(ctx context.Context, pl *plane) (page, error) {
		ns, total, err := pl.store.TraceNames(ctx, tenant, window, at)
		return page{ns, total}, err
	})
	if err != nil {
		s.fanError(w, r, "trace names", err)
		return nil, 0, false
	}
	var total int64
	for _, p := range pages {
		total += p.total
	}
	if len(pages) == 1 {
		return pages[0].names, total, true
	}
	lists := make([][]store.TraceName, len(pages))
	for i, p := range pages {
		lists[i] = p.names
	}
	names := mergePage(latestOnce(lists), lastSeenFirst, offset, limit)
	if ok = s.countTraceNames(w, r, planes, names); !ok {
		return nil, 0, false
	}
	return names, total, true
}

// latestOnce are the shards' name lists with each name kept only on the
// first shard where it was seen last.
func latestOnce(lists [][]store.TraceName) [][]store.TraceName {
	type kept struct {
		shard int
		seen  time.Time
	}
	keep := map[string]kept{}
	for i, list := range lists {
		for _, n := range list {
			if k, ok := keep[n.Name]; !ok || n.LastSeen.After(k.seen) {
				keep[n.Name] = kept{i, n.LastSeen}
			}
		}
	}
	out := make([][]store.TraceName, len(lists))
	for i, list := range lists {
		for _, n := range list {
			if keep[n.Name].shard == i {
				out[i] = append(out[i], n)
			}
		}
	}
	return out
}

// lastSeenFirst orders trace names as every shard lists them: the most
// recently seen first (a shard's ties in its own order).
func lastSeenFirst(a, b store.TraceName) int {
	return b.LastSeen.Compare(a.LastSeen)
}

// countTraceNames sets the counts of names to their sums over planes
// (each shard's window held a name's count there only when the name was
// in it).
func (s *Server) countTraceNames(w http.ResponseWriter, r *http.Request, planes []*plane, names []store.TraceName) bool {
	if len(names) == 0 {
		return true
	}
	wanted := make([]string, len(names))
	for i, n := range names {
		wanted[i] = n.Name
	}
	tenant := tenantOf(r)
	counts, err := eachShard(r.Context(), planes, func(ctx context.Context, pl *plane) ([]store.TraceName, error) {
		return pl.store.TraceNameCounts(ctx, tenant, wanted)
	})
	if err != nil {
		s.fanError(w, r, "trace names", err)
		return false
	}
	sum := map[string]store.TraceName{}
	for _, list := range counts {
		for _, c := range list {
			t := sum[c.Name]
			t.TraceCount, t.MessageCount = t.TraceCount+c.TraceCount, t.MessageCount+c.MessageCount
			sum[c.Name] = t
		}
	}
	for i, n := range names {
		names[i].TraceCount, names[i].MessageCount = sum[n.Name].TraceCount, sum[n.Name].MessageCount
	}
	return true
}
