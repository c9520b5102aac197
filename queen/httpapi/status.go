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

func queueRow(q store.QueueInfo) map[string]any {
	return map[string]any{"id": q.ID, "name": q.Name, "queue": q.Name, "namespace": nullable(q.Namespace), "task": nullable(q.Task),
		"createdAt": msTime(&q.CreatedAt), "partitions": q.PartitionCount, "partitionCount": q.PartitionCount,
		"messages": map[string]any{"total": q.Messages, "pending": q.Pending, "processing": 0},
		"pending":  q.Pending, "completed": max(q.Messages-q.Pending-q.DLQ, 0), "dlq": q.DLQ}
}

// status is GET /api/v1/status.
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	from, to, ok := s.window(w, r, time.Hour)
	if !ok {
		return
	}
	tenant := tenantOf(r)
	f := r.URL.Query()
	snap, err := s.store.SnapshotQueues(r.Context(), tenant, store.QueueFilter{Namespace: f.Get("namespace"), Task: f.Get("task"), Name: f.Get("queue")})
	if err != nil {
		s.storeError(w, r, "status", err)
		return
	}
	topErrors, err := s.store.TopDeadLetterErrors(r.Context(), tenant)
	if err != nil {
		s.storeError(w, r, "status", err)
		return
	}
	leases, dlq := snap.Leases, snap.DLQ
	var total, pending int64
	queues := []map[string]any{}
	for _, q := range snap.Queues {
		total, pending = total+q.Messages, pending+q.Pending
		if q.Messages > 0 {
			row := queueRow(q)
			row["totalConsumed"] = max(q.Messages-q.Pending, 0)
			queues = append(queues, row)
		}
	}
	top := make([]map[string]any, len(topErrors))
	for i, e := range topErrors {
		top[i] = map[string]any{"error": e.Error, "count": e.Count}
	}
	bm := bucketMinutes(to.Sub(from))
	buckets, err := s.queueBuckets(r, from, to, bm)
	if err != nil {
		s.storeError(w, r, "status", err)
		return
	}
	minutes, err := s.store.BrokerMinutes(r.Context(), "", from, to)
	if err != nil {
		s.storeError(w, r, "status", err)
		return
	}
	points := clusterBuckets(buckets, minutes, bm)
	throughput := make([]map[string]any, 0, len(points))
	var sum clusterBucket
	for i := len(points) - 1; i >= 0; i-- { // newest first
		throughput = append(throughput, throughputPoint(points[i], bm))
		sum.add(points[i])
	}
	workers := []map[string]any{}
	for _, b := range brokerBuckets(minutes, bm) {
		workers = append(workers, map[string]any{"hostname": b.hostname, "port": b.port, "workerId": b.id,
			"requests": b.requests, "lastSeen": msTime(&b.last)})
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
	writeJSON(w, http.StatusOK, map[string]any{
		"timeRange": map[string]any{"from": msTime(&from), "to": msTime(&to)}, "bucketMinutes": bm, "pointCount": len(throughput),
		"throughput": throughput, "queues": queues,
		"messages": map[string]any{"total": total, "pending": pending, "processing": 0,
			"completed": max(total-pending-dlq.Total, 0), "failed": 0, "deadLetter": dlq.Total,
			"requests":        map[string]any{"push": s.stats.pushRequests.Load(), "pop": s.stats.popRequests.Load(), "ack": s.stats.ackRequests.Load()},
			"batchEfficiency": batchEfficiency(sum.q)},
		"leases": map[string]any{"active": leases.Active, "partitionsWithLeases": leases.Partitions,
			"totalBatchSize": leases.BatchSize, "totalAcked": leases.Acked},
		"deadLetterQueue": map[string]any{"totalMessages": dlq.Total, "affectedPartitions": dlq.Partitions, "topErrors": top},
		"workers":         workers,
		"errors":          map[string]any{"dbErrors": sum.dbErrors, "ackFailed": sum.q.AckFailed, "dlqMessages": dlq.Total},
		"statsAge":        statsAge,
		"queueStatsAge":   queueStatsAge,
	})
}

// throughputPoint is one bucket of status.throughput.
func throughputPoint(p clusterBucket, bm int) map[string]any {
	secs := float64(bm * 60)
	brokers := float64(max(len(p.brokers), 1))
	return map[string]any{"timestamp": msTime(&p.at), "ingested": p.q.PushMessages, "processed": completed(p.q),
		"popMessages": p.q.PopMessages, "ingestedPerSecond": perSecond(p.q.PushMessages, bm),
		"processedPerSecond": perSecond(completed(p.q), bm), "popPerSecond": perSecond(p.q.PopMessages, bm),
		"avgLagMs": avgLag(p.q.LagSumMs, p.q.LagCount), "maxLagMs": p.q.LagMaxMs,
		"avgEventLoopLagMs": 0, "maxEventLoopLagMs": 0, "minFreeSlots": 0,
		"dbErrors": p.dbErrors, "ackFailed": p.q.AckFailed, "dlqCount": p.q.DLQ,
		// CPU as a percent of one core, the brokers' mean.
		"queenCpuUserPct": float64(p.cpuUserUs) / 1e6 / secs / brokers * 100,
		"queenCpuSysPct":  float64(p.cpuSysUs) / 1e6 / secs / brokers * 100,
		"queenRssMb":      p.rssBytes / (1 << 20),
		"dbPoolActive":    p.poolActive, "dbPoolIdle": p.poolIdle, "dbPoolSize": p.poolSize,
		"avgLatencyMs": p.avgLatency(), "p99LatencyMs": p.p99Latency}
}

// batchEfficiency is messages per request over the window: per push, per
// pop (empty pops included) and per ack request (autoAck pops send none).
func batchEfficiency(q store.QueueBucket) map[string]any {
	ratio := func(n, d int64) float64 {
		if d == 0 {
			return 0
		}
		return float64(n) / float64(d)
	}
	return map[string]any{"push": ratio(q.PushMessages, q.PushRequests), "pop": ratio(q.PopMessages, q.PopRequests),
		"ack": ratio(q.AckSuccess+q.AckFailed, q.AckRequests)}
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
	qs, err := s.store.ListQueuesPage(r.Context(), tenantOf(r), f)
	if err != nil {
		s.storeError(w, r, "status queues", err)
		return
	}
	out := []map[string]any{}
	for _, q := range qs {
		out = append(out, queueRow(q))
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out, "pagination": map[string]any{"limit": f.Limit, "offset": f.Offset}})
}

// partitionCounts is one partition's six counts.
// partitionCounts are a partition's figures in queue mode: completed is
// what the cursor passed and queue mode did not dead-letter; deadLetter
// counts every group's; failed is always 0 (a failed message is retried,
// so pending, or dead-lettered).
func partitionCounts(p store.PartitionInfo) map[string]any {
	return map[string]any{"total": p.Messages, "pending": p.Pending, "processing": p.Processing,
		"completed": max(p.Messages-p.Pending-p.QueueDLQ, 0), "failed": 0, "deadLetter": p.DLQ}
}

// queueCounts are partitionCounts summed over the queue.
func queueCounts(q store.QueueInfo) map[string]any {
	return map[string]any{"total": q.Messages, "pending": q.Pending, "processing": q.Processing,
		"completed": max(q.Messages-q.Pending-q.QueueDLQ, 0), "failed": 0, "deadLetter": q.DLQ}
}

// statusQueue is GET /api/v1/status/queues/{queue}: the queue, its
// configuration and every partition.
func (s *Server) statusQueue(w http.ResponseWriter, r *http.Request) {
	q, err := s.store.GetQueue(r.Context(), tenantOf(r), r.PathValue("queue"))
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "Queue not found")
		return
	}
	if err != nil {
		s.storeError(w, r, "status queue", err)
		return
	}
	parts := make([]map[string]any, len(q.Partitions))
	for i, p := range q.Partitions {
		c := partitionCounts(p)
		parts[i] = map[string]any{"id": p.ID, "name": p.Name, "createdAt": msTime(&p.CreatedAt), "messages": c, "stats": c,
			"pending": p.Pending, "total": p.Messages, "lastActivity": msTime(p.LastMessageAt), "newestMessage": msTime(p.LastMessageAt),
			"oldestMessage": msTime(p.OldestAt),
			"cursor":        map[string]any{"totalConsumed": p.TotalConsumed, "batchesConsumed": p.BatchesConsumed},
			// queenctl's partition list reads these flat.
			"processing": c["processing"], "completed": c["completed"], "failed": 0, "dlq": p.DLQ}
	}
	o := q.Options
	totals := queueCounts(q)
	totals["messages"] = queueCounts(q)
	writeJSON(w, http.StatusOK, map[string]any{
		// queenctl's status <queue> reads these flat.
		"name": q.Name, "pending": q.Pending, "processing": q.Processing, "completed": totals["completed"], "failed": 0, "dlq": q.DLQ,
		"queue": map[string]any{"id": q.ID, "name": q.Name, "namespace": nullable(q.Namespace), "task": nullable(q.Task),
			"priority": o.Priority, "createdAt": msTime(&q.CreatedAt), "config": map[string]any{"leaseTime": o.LeaseTime,
				"retryLimit": o.RetryLimit, "retryDelay": o.RetryDelay, "ttl": o.TTL, "maxQueueSize": o.MaxSize,
				"deadLetterQueue": o.DeadLetterQueue}},
		"partitions": parts, "totals": totals})
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
	points := []map[string]any{}
	for at := start; at.Before(end); at = at.Add(step) {
		points = append(points, map[string]any{"timestamp": at.Format(time.RFC3339), "messages": counts[at]})
	}
	body := map[string]any{"dataPoints": points, "interval": interval,
		"from": from.Format(time.RFC3339), "to": to.Format(time.RFC3339),
		"truncated": truncated, "pointLimit": analyticsPointLimit}
	if truncated {
		body["nextFrom"] = end.Format(time.RFC3339)
	}
	writeJSON(w, http.StatusOK, body)
}

// groupedResources is GET /api/v1/resources/namespaces and .../tasks,
// derived from the queues; otherKey counts the distinct values of the
// other dimension (queenctl's taskCount and namespaceCount).
func (s *Server) groupedResources(key string, of func(store.QueueInfo) string, otherKey string, other func(store.QueueInfo) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		snap, err := s.store.SnapshotQueues(r.Context(), tenantOf(r), store.QueueFilter{})
		if err != nil {
			s.storeError(w, r, key, err)
			return
		}
		qs := snap.Queues
		type agg struct {
			queues, partitions, total, pending int64
			others                             map[string]bool
		}
		by := map[string]*agg{}
		var names []string
		for _, q := range qs {
			n := of(q)
			if n == "" {
				continue
			}
			if by[n] == nil {
				by[n] = &agg{others: map[string]bool{}}
				names = append(names, n)
			}
			a := by[n]
			a.queues, a.partitions, a.total, a.pending = a.queues+1, a.partitions+int64(q.PartitionCount), a.total+q.Messages, a.pending+q.Pending
			if o := other(q); o != "" {
				a.others[o] = true
			}
		}
		sort.Strings(names)
		single := key[:len(key)-1]
		out := []map[string]any{}
		for _, n := range names {
			a := by[n]
			out = append(out, map[string]any{single: n, "name": n, "queues": a.queues, "queueCount": a.queues, otherKey: len(a.others),
				"partitions": a.partitions, "messages": map[string]any{"total": a.total, "pending": a.pending}})
		}
		writeJSON(w, http.StatusOK, map[string]any{key: out})
	}
}
