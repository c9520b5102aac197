package httpapi

import (
	"net/http"
	"sort"
	"time"

	"github.com/queen-go/queen/queen/store"
)

// The /api/v1/analytics/* routes (contract-admin.md 4.7), from the
// recorded analytics (package analytics, store.QueueBuckets and
// store.BrokerMinutes): a series has a point for each bucket something was
// recorded in, and nothing else is invented. Retention comes from the
// history the retention pass writes, postgres-stats from PostgreSQL's
// statistics views. Parked long polls are not recorded: those series are
// empty but well-formed.

// analyticsWindow reads from/to (default: the last hour) and answers the
// shared envelope.
func (s *Server) analyticsWindow(w http.ResponseWriter, r *http.Request) (from, to time.Time, bm int, env map[string]any, ok bool) {
	from, to, ok = s.window(w, r, time.Hour)
	if !ok {
		return from, to, 0, nil, false
	}
	if !to.After(from) {
		writeError(w, http.StatusBadRequest, "from must be before to")
		return from, to, 0, nil, false
	}
	bm = bucketMinutes(to.Sub(from))
	env = map[string]any{"timeRange": map[string]any{"from": msTime(&from), "to": msTime(&to)}, "bucketMinutes": bm}
	return from, to, bm, env, true
}

// queueBuckets reads the tenant's recorded queue buckets of the window
// (queue, namespace and task from the query).
func (s *Server) queueBuckets(r *http.Request, from, to time.Time, bm int) ([]store.QueueBucket, error) {
	q := r.URL.Query()
	return s.store.QueueBuckets(r.Context(), store.StatsFilter{Tenant: tenantOf(r), Queue: q.Get("queue"),
		Namespace: q.Get("namespace"), Task: q.Get("task"), From: from, To: to, BucketMinutes: bm})
}

// avgLag is a bucket's mean pop age in milliseconds.
func avgLag(sum, n int64) float64 {
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// completed is what a bucket completed: its successful acks and what
// autoAck pops completed.
func completed(b store.QueueBucket) int64 { return b.AckSuccess + b.AutoAcked }

// perSecond is a count over a bucket of bm minutes, per second.
func perSecond(n int64, bm int) float64 { return float64(n) / float64(bm*60) }

// queueLag is GET /api/v1/analytics/queue-lag: a top-level array of the
// recorded per-minute rows with pops, newest first.
func (s *Server) queueLag(w http.ResponseWriter, r *http.Request) {
	from, to, _, _, ok := s.analyticsWindow(w, r)
	if !ok {
		return
	}
	buckets, err := s.queueBuckets(r, from, to, 1)
	if err != nil {
		s.storeError(w, r, "queue lag", err)
		return
	}
	out := []map[string]any{}
	for i := len(buckets) - 1; i >= 0; i-- {
		b := buckets[i]
		if b.PopMessages == 0 {
			continue
		}
		out = append(out, map[string]any{"queueName": b.Queue, "popCount": b.PopMessages,
			"avgLagMs": avgLag(b.LagSumMs, b.LagCount), "maxLagMs": b.LagMaxMs, "bucketTime": msTime(&b.Bucket)})
	}
	writeJSON(w, http.StatusOK, out)
}

// queueOps is GET /api/v1/analytics/queue-ops: the recorded buckets per
// queue, oldest first, and the tenant's queue names (one when queue is
// given).
func (s *Server) queueOps(w http.ResponseWriter, r *http.Request) {
	from, to, bm, env, ok := s.analyticsWindow(w, r)
	if !ok {
		return
	}
	f, ok := queueFilter(w, r, 0)
	if !ok {
		return
	}
	qs, err := s.store.ListQueuesPage(r.Context(), tenantOf(r), f)
	if err != nil {
		s.storeError(w, r, "queue ops", err)
		return
	}
	buckets, err := s.queueBuckets(r, from, to, bm)
	if err != nil {
		s.storeError(w, r, "queue ops", err)
		return
	}
	names := []string{}
	for _, q := range qs {
		names = append(names, q.Name)
	}
	series := make([]map[string]any, len(buckets))
	for i, b := range buckets {
		series[i] = map[string]any{"bucket": msTime(&b.Bucket), "queueName": b.Queue,
			"pushRequests": b.PushRequests, "pushMessages": b.PushMessages, "popMessages": b.PopMessages, "popEmpty": b.PopEmpty,
			"ackRequests": b.AckRequests, "ackSuccess": completed(b), "ackFailed": b.AckFailed, "autoAcked": b.AutoAcked, "transactions": 0,
			"partitionsCreated": 0, "partitionsDeleted": 0, "partitionCount": max(b.Partitions, 0),
			"avgLagMs": avgLag(b.LagSumMs, b.LagCount), "maxLagMs": b.LagMaxMs,
			"pushPerSecond": perSecond(b.PushMessages, bm), "popPerSecond": perSecond(b.PopMessages, bm),
			"ackPerSecond": perSecond(completed(b)+b.AckFailed, bm), "emptyPerSecond": perSecond(b.PopEmpty, bm),
			"parkedCount": 0, "pending": max(b.Pending, 0), "dlq": b.DLQ}
	}
	env["series"], env["queues"] = series, names
	writeJSON(w, http.StatusOK, env)
}

// queueParkedReplicas is GET /api/v1/analytics/queue-parked-replicas.
func (s *Server) queueParkedReplicas(w http.ResponseWriter, r *http.Request) {
	if _, _, _, env, ok := s.analyticsWindow(w, r); ok {
		env["series"], env["replicas"] = []any{}, []any{}
		writeJSON(w, http.StatusOK, env)
	}
}

// retentionAnalytics is GET /api/v1/analytics/retention: what retention,
// completed retention and eviction deleted per bucket, oldest first.
func (s *Server) retentionAnalytics(w http.ResponseWriter, r *http.Request) {
	from, to, bm, env, ok := s.analyticsWindow(w, r)
	if !ok {
		return
	}
	buckets, err := s.store.RetentionSeries(r.Context(), tenantOf(r), r.URL.Query().Get("queue"), from, to, bm)
	if err != nil {
		s.storeError(w, r, "retention analytics", err)
		return
	}
	series := make([]map[string]any, len(buckets))
	var ret, comp, evict, total, events int64
	for i, b := range buckets {
		series[i] = map[string]any{"bucket": msTime(&b.Bucket), "retentionMsgs": b.Retention, "completedRetentionMsgs": b.Completed,
			"evictionMsgs": b.Eviction, "totalMsgs": b.Total, "eventCount": b.Events}
		ret, comp, evict, total, events = ret+b.Retention, comp+b.Completed, evict+b.Eviction, total+b.Total, events+b.Events
	}
	env["series"] = series
	env["totals"] = map[string]any{"retentionMsgs": ret, "completedRetentionMsgs": comp, "evictionMsgs": evict,
		"totalMsgs": total, "eventCount": events}
	writeJSON(w, http.StatusOK, env)
}

// systemMetrics is GET /api/v1/analytics/system-metrics: each broker's
// recorded gauges per bucket (hostname and workerId narrow it).
func (s *Server) systemMetrics(w http.ResponseWriter, r *http.Request) {
	from, to, bm, env, ok := s.analyticsWindow(w, r)
	if !ok {
		return
	}
	minutes, err := s.store.BrokerMinutes(r.Context(), r.URL.Query().Get("workerId"), from, to)
	if err != nil {
		s.storeError(w, r, "system metrics", err)
		return
	}
	host := r.URL.Query().Get("hostname")
	replicas := []map[string]any{}
	points := 0
	for _, b := range brokerBuckets(minutes, bm) {
		if host != "" && b.hostname != host {
			continue
		}
		series := make([]map[string]any, len(b.buckets))
		for i, k := range b.buckets {
			g := k.gauges
			metrics := map[string]any{"threadpool": map[string]any{}, "registries": map[string]any{}, "shared_state": map[string]any{}}
			for group, names := range g {
				metrics[group] = names
			}
			series[i] = map[string]any{"timestamp": msTime(&k.at), "sampleCount": k.samples, "metrics": metrics}
		}
		points += len(series)
		replicas = append(replicas, map[string]any{"hostname": b.hostname, "port": b.port, "workerId": b.id, "timeSeries": series})
	}
	env["replicas"], env["replicaCount"], env["pointCount"] = replicas, len(replicas), points
	writeJSON(w, http.StatusOK, env)
}

// workerMetrics is GET /api/v1/analytics/worker-metrics: the tenant's
// recorded message counts per bucket, with the brokers' request counts,
// latency and pool; the brokers; the queues' pops and lag; and totals.
// The pending count is live.
func (s *Server) workerMetrics(w http.ResponseWriter, r *http.Request) {
	from, to, bm, env, ok := s.analyticsWindow(w, r)
	if !ok {
		return
	}
	o, err := s.store.Overview(r.Context(), tenantOf(r))
	if err != nil {
		s.storeError(w, r, "worker metrics", err)
		return
	}
	buckets, err := s.queueBuckets(r, from, to, bm)
	if err != nil {
		s.storeError(w, r, "worker metrics", err)
		return
	}
	minutes, err := s.store.BrokerMinutes(r.Context(), r.URL.Query().Get("workerId"), from, to)
	if err != nil {
		s.storeError(w, r, "worker metrics", err)
		return
	}
	points := clusterBuckets(buckets, minutes, bm)
	series := make([]map[string]any, len(points))
	var total clusterBucket
	for i, p := range points {
		series[i] = map[string]any{"timestamp": msTime(&p.at), "pushMessages": p.q.PushMessages, "popMessages": p.q.PopMessages,
			"ackMessages": completed(p.q) + p.q.AckFailed, "pushRequests": p.q.PushRequests, "popRequests": p.q.PopRequests,
			"ackRequests": p.q.AckRequests, "jobsDone": completed(p.q),
			"pushPerSecond": perSecond(p.q.PushMessages, bm), "popPerSecond": perSecond(p.q.PopMessages, bm),
			"ackPerSecond": perSecond(completed(p.q)+p.q.AckFailed, bm), "avgEventLoopLagMs": 0, "maxEventLoopLagMs": 0,
			"avgFreeSlots": 0, "minFreeSlots": 0, "dbConnections": p.poolActive, "avgJobQueueSize": 0, "maxJobQueueSize": 0,
			"backoffSize": 0, "avgLagMs": avgLag(p.q.LagSumMs, p.q.LagCount), "maxLagMs": p.q.LagMaxMs, "lagCount": p.q.LagCount,
			"dbErrors": p.dbErrors, "ackSuccess": completed(p.q), "ackFailed": p.q.AckFailed, "dlqCount": p.q.DLQ,
			"avgLatencyMs": p.avgLatency(), "p99LatencyMs": p.p99Latency, "requests": p.requests}
		total.add(p)
	}
	workers := []map[string]any{}
	for _, b := range brokerBuckets(minutes, bm) {
		workers = append(workers, map[string]any{"hostname": b.hostname, "port": b.port, "workerId": b.id,
			"requests": b.requests, "pushRequests": b.push, "popRequests": b.pop, "ackRequests": b.ack,
			"lastSeen": msTime(&b.last)})
	}
	env["pointCount"], env["timeSeries"], env["workers"], env["queues"] = len(series), series, workers, queueLagRows(buckets)
	env["summary"] = map[string]any{"totalPushMessages": total.q.PushMessages, "totalPopMessages": total.q.PopMessages,
		"totalAckMessages": completed(total.q) + total.q.AckFailed, "totalPushRequests": total.q.PushRequests,
		"totalPopRequests": total.q.PopRequests, "totalAckRequests": total.q.AckRequests, "pendingMessages": o.Pending}
	writeJSON(w, http.StatusOK, env)
}

// queueLagRows are the queues' pops and lag over a window, by name.
func queueLagRows(buckets []store.QueueBucket) []map[string]any {
	type agg struct{ pops, sum, n, max int64 }
	by := map[string]*agg{}
	var names []string
	for _, b := range buckets {
		a := by[b.Queue]
		if a == nil {
			a = &agg{}
			by[b.Queue] = a
			names = append(names, b.Queue)
		}
		a.pops, a.sum, a.n, a.max = a.pops+b.PopMessages, a.sum+b.LagSumMs, a.n+b.LagCount, max(a.max, b.LagMaxMs)
	}
	sort.Strings(names)
	out := []map[string]any{}
	for _, n := range names {
		a := by[n]
		out = append(out, map[string]any{"queueName": n, "popCount": a.pops, "avgLagMs": avgLag(a.sum, a.n), "maxLagMs": a.max})
	}
	return out
}

// postgresStats is GET /api/v1/analytics/postgres-stats.
func (s *Server) postgresStats(w http.ResponseWriter, r *http.Request) {
	doc, err := s.store.PostgresStats(r.Context())
	if err != nil {
		s.storeError(w, r, "postgres stats", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(doc)
}
