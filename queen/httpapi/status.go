package httpapi

import (
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/queen-go/queen/queen/store"
)

// Status and resource views (contract-admin.md section 4). Every number is
// computed from the rows when asked; series this broker does not record
// (throughput, workers) are empty, never invented.

// window reads from/to (defaults: now-def and now); a malformed one is 400.
func (s *Server) window(w http.ResponseWriter, r *http.Request, def time.Duration) (time.Time, time.Time, bool) {
	to := s.clock.Now().UTC()
	from := to.Add(-def)
	for name, dst := range map[string]*time.Time{"from": &from, "to": &to} {
		if v := r.URL.Query().Get(name); v != "" {
			t, err := parseInstant(v)
			if err != nil {
				writeError(w, http.StatusBadRequest, name+" must be an ISO 8601 / RFC 3339 instant")
				return from, to, false
			}
			*dst = t.UTC()
		}
	}
	return from, to, true
}

// bucketMinutes is the bucket width for a window.
func bucketMinutes(d time.Duration) int {
	switch m := d.Minutes(); {
	case m <= 60:
		return 1
	case m <= 360:
		return 5
	case m <= 1440:
		return 15
	case m <= 10080:
		return 60
	}
	return 360
}

// queueRow is q as /status/queues lists it.
func queueRow(q store.QueueInfo) queueSummary {
	return queueSummary{ID: q.ID, Name: q.Name, Queue: q.Name, Namespace: strPtr(q.Namespace), Task: strPtr(q.Task),
		CreatedAt: msStamp(q.CreatedAt), Partitions: q.PartitionCount, PartitionCount: q.PartitionCount,
		Messages: queueSummaryCounts{Total: q.Messages, Pending: q.Pending},
		Pending:  q.Pending, Completed: completedOf(q.Messages, q.Pending, q.QueueDLQ), DLQ: q.DLQ}
}

// status is GET /api/v1/status.
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	from, to, ok := s.window(w, r, time.Hour)
	if !ok {
		return
	}
	tenant := tenantOf(r)
	f := r.URL.Query()
	snap, err := s.snapshotQueues(r.Context(), tenant, store.QueueFilter{Namespace: f.Get("namespace"), Task: f.Get("task"), Name: f.Get("queue")})
	if err != nil {
		s.fanError(w, r, "status", err)
		return
	}
	topErrors, err := s.topDeadLetterErrors(r.Context(), tenant)
	if err != nil {
		s.fanError(w, r, "status", err)
		return
	}
	leases, dlq := snap.Leases, snap.DLQ
	var total, pending, furthestDLQ int64
	queues := []statusQueueRow{}
	for _, q := range snap.Queues {
		total, pending, furthestDLQ = total+q.Messages, pending+q.Pending, furthestDLQ+q.QueueDLQ
		if q.Messages > 0 {
			queues = append(queues, statusQueueRow{queueRow(q), max(q.Messages-q.Pending, 0)})
		}
	}
	top := make([]errorCount, len(topErrors))
	for i, e := range topErrors {
		top[i] = errorCount{Error: e.Error, Count: e.Count}
	}
	bm := bucketMinutes(to.Sub(from))
	buckets, err := s.queueBuckets(r, from, to, bm)
	if err != nil {
		s.fanError(w, r, "status", err)
		return
	}
	minutes, err := s.store.BrokerMinutes(r.Context(), "", from, to)
	if err != nil {
		s.storeError(w, r, "status", err)
		return
	}
	points := clusterBuckets(buckets, minutes, bm)
	throughput := make([]throughputPoint, 0, len(points))
	var sum clusterBucket
	for i := len(points) - 1; i >= 0; i-- { // newest first
		throughput = append(throughput, newThroughputPoint(points[i], bm))
		sum.add(points[i])
	}
	workers := []workerRow{}
	for _, b := range brokerBuckets(minutes, bm) {
		workers = append(workers, workerRow{Hostname: b.hostname, Port: b.port, WorkerID: b.id,
			Requests: b.requests, LastSeen: msStamp(b.last), workerGauges: newWorkerGauges(b)})
	}
	// statsAge is the age of the oldest figure in the answer: the last
	// recorded minute or the queue snapshot, whichever is older.
	statsAge, queueStatsAge := -1.0, -1.0
	if len(minutes) > 0 {
		statsAge = max(s.clock.Now().Sub(minutes[len(minutes)-1].Minute.Add(time.Minute)).Seconds(), 0)
	}
	if !snap.Oldest.IsZero() {
		queueStatsAge = max(s.clock.Now().Sub(snap.Oldest).Seconds(), 0)
		statsAge = max(statsAge, queueStatsAge)
	}
	writeJSON(w, http.StatusOK, statusAnswer{
		TimeRange: timeRange{From: msStamp(from), To: msStamp(to)}, BucketMinutes: bm, PointCount: len(throughput),
		Throughput: throughput, Queues: queues,
		Messages: statusMessages{Total: total, Pending: pending,
			Completed: completedOf(total, pending, furthestDLQ), DeadLetter: dlq.Total,
			Requests:        requestsByKind{Push: s.stats.pushRequests.Load(), Pop: s.stats.popRequests.Load(), Ack: s.stats.ackRequests.Load()},
			BatchEfficiency: newBatchEfficiency(sum.q)},
		Leases: leaseSummary{Active: leases.Active, PartitionsWithLeases: leases.Partitions,
			TotalBatchSize: leases.BatchSize, TotalAcked: leases.Acked},
		DeadLetterQueue: deadLetterSummary{TotalMessages: dlq.Total, AffectedPartitions: dlq.Partitions, TopErrors: top},
		Workers:         workers,
		Errors:          statusErrors{DBErrors: sum.dbErrors, AckFailed: sum.q.AckFailed, DLQMessages: dlq.Total},
		StatsAge:        statsAge,
		QueueStatsAge:   queueStatsAge,
	})
}

// newThroughputPoint is one bucket of status.throughput.
func newThroughputPoint(p clusterBucket, bm int) throughputPoint {
	secs := float64(bm * 60)
	brokers := float64(max(len(p.brokers), 1))
	return throughputPoint{Timestamp: msStamp(p.at), Ingested: p.q.PushMessages, Processed: completed(p.q),
		PopMessages: p.q.PopMessages, IngestedPerSecond: perSecond(p.q.PushMessages, bm),
		ProcessedPerSecond: perSecond(completed(p.q), bm), PopPerSecond: perSecond(p.q.PopMessages, bm),
		AvgLagMs: avgLag(p.q.LagSumMs, p.q.LagCount), MaxLagMs: p.q.LagMaxMs,
		DBErrors: p.dbErrors, AckFailed: p.q.AckFailed, DLQCount: p.q.DLQ,
		// CPU as a percent of one core, the brokers' mean.
		QueenCPUUserPct: float64(p.cpuUserUs) / 1e6 / secs / brokers * 100,
		QueenCPUSysPct:  float64(p.cpuSysUs) / 1e6 / secs / brokers * 100,
		QueenRssMb:      p.rssBytes / (1 << 20),
		DBPoolActive:    p.poolActive, DBPoolIdle: p.poolIdle, DBPoolSize: p.poolSize,
		AvgLatencyMs: p.avgLatency(), P99LatencyMs: p.p99Latency}
}

// newBatchEfficiency is q's messages per request.
func newBatchEfficiency(q store.QueueBucket) batchEfficiency {
	ratio := func(n, d int64) float64 {
		if d == 0 {
			return 0
		}
		return float64(n) / float64(d)
	}
	return batchEfficiency{Push: ratio(q.PushMessages, q.PushRequests), Pop: ratio(q.PopMessages, q.PopRequests),
		Ack: ratio(q.AckSuccess+q.AckFailed, q.AckRequests)}
}

// statusQueues is GET /api/v1/status/queues?namespace&task&limit&offset.
func (s *Server) statusQueues(w http.ResponseWriter, r *http.Request) {
	f, ok := queueFilter(w, r, 100)
	if !ok {
		return
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	qs, err := s.queuePage(r.Context(), tenantOf(r), f)
	if err != nil {
		s.fanError(w, r, "status queues", err)
		return
	}
	out := []queueSummary{}
	for _, q := range qs {
		out = append(out, queueRow(q))
	}
	writeJSON(w, http.StatusOK, statusQueuesAnswer{Queues: out, Pagination: pagination{Limit: f.Limit, Offset: f.Offset}})
}

// partitionCounts are a partition's figures in queue mode: completed is
// what the cursor passed and queue mode did not dead-letter; deadLetter
// counts every group's; failed is always 0 (a failed message is retried,
// so pending, or dead-lettered).
func partitionCounts(p store.PartitionInfo) stateCounts {
	return stateCounts{Total: p.Messages, Pending: p.Pending, Processing: p.Processing,
		Completed: completedOf(p.Messages, p.Pending, p.QueueDLQ), DeadLetter: p.DLQ}
}

// queueCounts are partitionCounts summed over the queue.
func queueCounts(q store.QueueInfo) stateCounts {
	return stateCounts{Total: q.Messages, Pending: q.Pending, Processing: q.Processing,
		Completed: completedOf(q.Messages, q.Pending, q.QueueDLQ), DeadLetter: q.DLQ}
}

// statusQueue is GET /api/v1/status/queues/{queue}: the queue, its
// configuration and every partition.
func (s *Server) statusQueue(w http.ResponseWriter, r *http.Request) {
	pl, err := s.planeFor(r.Context(), tenantOf(r), "", r.PathValue("queue"), false)
	if err != nil {
		s.placementFailed(w, r, err)
		return
	}
	q, err := pl.store.GetQueue(r.Context(), tenantOf(r), r.PathValue("queue"))
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "Queue not found")
		return
	}
	if err != nil {
		s.storeError(w, r, "status queue", err)
		return
	}
	parts := make([]partitionStatus, len(q.Partitions))
	for i, p := range q.Partitions {
		parts[i] = newPartitionStatus(p)
	}
	o := q.Options
	totals := queueCounts(q)
	writeJSON(w, http.StatusOK, queueStatus{
		Name: q.Name, Pending: q.Pending, Processing: q.Processing, Completed: totals.Completed, DLQ: q.DLQ,
		Queue: queueDetail{ID: q.ID, Name: q.Name, Namespace: strPtr(q.Namespace), Task: strPtr(q.Task),
			Priority: o.Priority, CreatedAt: msStamp(q.CreatedAt), Config: queueConfig{LeaseTime: o.LeaseTime,
				RetryLimit: o.RetryLimit, RetryDelay: o.RetryDelay, TTL: o.TTL, MaxQueueSize: o.MaxSize,
				DeadLetterQueue: o.DeadLetterQueue}},
		Partitions: parts, Totals: queueTotals{totals, totals}})
}

// newPartitionStatus is p as /status/queues/{queue} lists it.
func newPartitionStatus(p store.PartitionInfo) partitionStatus {
	c := partitionCounts(p)
	return partitionStatus{ID: p.ID, Name: p.Name, CreatedAt: msStamp(p.CreatedAt), Messages: c, Stats: c,
		Pending: p.Pending, Total: p.Messages, LastActivity: msStampOrNull(p.LastMessageAt), NewestMessage: msStampOrNull(p.LastMessageAt),
		OldestMessage: msStampOrNull(p.OldestAt),
		Cursor:        cursorCounts{TotalConsumed: p.TotalConsumed, BatchesConsumed: p.BatchesConsumed},
		Processing:    c.Processing, Completed: c.Completed, DLQ: p.DLQ}
}

// analyticsPointLimit bounds the points of one status/analytics answer: a
// minute interval over a long window would otherwise answer (and count)
// a point per minute of it.
const analyticsPointLimit = 10000

// statusAnalytics is GET /api/v1/status/analytics: messages stored per
// minute, hour (default) or day over the window (default 24 h), zero-filled,
// oldest first. A window longer than analyticsPointLimit buckets is cut
// after the first ones, and the answer says so (truncated, pointLimit and
// nextFrom, where the next page starts): before, the cut was silent.
func (s *Server) statusAnalytics(w http.ResponseWriter, r *http.Request) {
	from, to, ok := s.window(w, r, 24*time.Hour)
	if !ok {
		return
	}
	q := r.URL.Query()
	interval, step := q.Get("interval"), time.Hour
	switch interval {
	case "minute":
		step = time.Minute
	case "day":
		step = 24 * time.Hour
	default:
		interval = "hour"
	}
	start := from.Truncate(step)
	end, truncated := to, false
	if limit := start.Add(analyticsPointLimit * step); limit.Before(to) {
		end, truncated = limit, true
	}
	// Only the buckets answered are counted.
	counts, err := s.store.MessagesPerBucket(r.Context(), tenantOf(r), q.Get("queue"), q.Get("namespace"), q.Get("task"), from, end, step)
	if err != nil {
		s.storeError(w, r, "analytics", err)
		return
	}
	points := []analyticsPoint{}
	for at := start; at.Before(end); at = at.Add(step) {
		points = append(points, analyticsPoint{Timestamp: at.Format(time.RFC3339), Messages: counts[at]})
	}
	body := analyticsAnswer{DataPoints: points, Interval: interval,
		From: from.Format(time.RFC3339), To: to.Format(time.RFC3339),
		Truncated: truncated, PointLimit: analyticsPointLimit}
	if truncated {
		body.NextFrom = end.Format(time.RFC3339)
	}
	writeJSON(w, http.StatusOK, body)
}

// namespaceResources is GET /api/v1/resources/namespaces: the queues
// summed by namespace, with how many tasks each namespace's queues name.
func (s *Server) namespaceResources(w http.ResponseWriter, r *http.Request) {
	groups, err := s.sumQueuesBy(r, queueNamespace, queueTask)
	if err != nil {
		s.fanError(w, r, "namespaces", err)
		return
	}
	out := make([]namespaceGroup, len(groups))
	for i, g := range groups {
		out[i] = namespaceGroup{Namespace: g.Name, resourceGroup: g.resourceGroup, TaskCount: g.others}
	}
	writeJSON(w, http.StatusOK, namespacesAnswer{Namespaces: out})
}

// taskResources is GET /api/v1/resources/tasks: the queues summed by
// task, with how many namespaces each task's queues name.
func (s *Server) taskResources(w http.ResponseWriter, r *http.Request) {
	groups, err := s.sumQueuesBy(r, queueTask, queueNamespace)
	if err != nil {
		s.fanError(w, r, "tasks", err)
		return
	}
	out := make([]taskGroup, len(groups))
	for i, g := range groups {
		out[i] = taskGroup{Task: g.Name, resourceGroup: g.resourceGroup, NamespaceCount: g.others}
	}
	writeJSON(w, http.StatusOK, tasksAnswer{Tasks: out})
}

// queueNamespace and queueTask are the dimensions resources group by.
func queueNamespace(q store.QueueInfo) string { return q.Namespace }
func queueTask(q store.QueueInfo) string      { return q.Task }

// queueGroup is the queues of one value of a dimension, summed; others
// counts the distinct values of the other dimension among them
// (queenctl's taskCount and namespaceCount).
type queueGroup struct {
	resourceGroup
	others int
}

// sumQueuesBy groups the tenant's queues by of (a queue without a value
// is in no group), sorted by value.
func (s *Server) sumQueuesBy(r *http.Request, of, other func(store.QueueInfo) string) ([]queueGroup, error) {
	snap, err := s.snapshotQueues(r.Context(), tenantOf(r), store.QueueFilter{})
	if err != nil {
		return nil, err
	}
	by := map[string]*resourceGroup{}
	others := map[string]map[string]bool{}
	var names []string
	for _, q := range snap.Queues {
		n := of(q)
		if n == "" {
			continue
		}
		if by[n] == nil {
			by[n], others[n] = &resourceGroup{Name: n}, map[string]bool{}
			names = append(names, n)
		}
		g := by[n]
		g.Queues, g.Partitions = g.Queues+1, g.Partitions+int64(q.PartitionCount)
		g.Messages.Total, g.Messages.Pending = g.Messages.Total+q.Messages, g.Messages.Pending+q.Pending
		if o := other(q); o != "" {
			others[n][o] = true
		}
	}
	sort.Strings(names)
	out := make([]queueGroup, len(names))
	for i, n := range names {
		g := *by[n]
		g.QueueCount = g.Queues
		out[i] = queueGroup{g, len(others[n])}
	}
	return out, nil
}
