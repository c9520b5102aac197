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
func (s *Server) analyticsWindow(w http.ResponseWriter, r *http.Request) (from, to time.Time, bm int, env analyticsEnvelope, ok bool) {
	from, to, ok = s.window(w, r, time.Hour)
	if !ok {
		return from, to, 0, env, false
	}
	if !to.After(from) {
		writeError(w, http.StatusBadRequest, "from must be before to")
		return from, to, 0, env, false
	}
	bm = bucketMinutes(to.Sub(from))
	env = analyticsEnvelope{TimeRange: analyticsRange{From: msStamp(from), To: msStamp(to)}, BucketMinutes: bm}
	return from, to, bm, env, true
}

// queueBuckets reads the tenant's recorded queue buckets of the window
// (queue, namespace and task from the query).
func (s *Server) queueBuckets(r *http.Request, from, to time.Time, bm int) ([]store.QueueBucket, error) {
	q := r.URL.Query()
	return s.queueBucketsOf(r.Context(), store.StatsFilter{Tenant: tenantOf(r), Queue: q.Get("queue"),
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
	out := []queueLagBucket{}
	for i := len(buckets) - 1; i >= 0; i-- {
		b := buckets[i]
		if b.PopMessages == 0 {
			continue
		}
		out = append(out, queueLagBucket{queueLagRow{QueueName: b.Queue, PopCount: b.PopMessages,
			AvgLagMs: avgLag(b.LagSumMs, b.LagCount), MaxLagMs: b.LagMaxMs}, msStamp(b.Bucket)})
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
	series := make([]queueOpsPoint, len(buckets))
	for i, b := range buckets {
		series[i] = newQueueOpsPoint(b, bm)
	}
	writeJSON(w, http.StatusOK, queueOpsAnswer{env, series, names})
}

// queueParkedReplicas is GET /api/v1/analytics/queue-parked-replicas.
func (s *Server) queueParkedReplicas(w http.ResponseWriter, r *http.Request) {
	if _, _, _, env, ok := s.analyticsWindow(w, r); ok {
		writeJSON(w, http.StatusOK, queueParkedAnswer{env, []queueParkedPoint{}, []queueParkedReplica{}})
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
	a := retentionAnswer{analyticsEnvelope: env, Series: make([]retentionPoint, len(buckets))}
	for i, b := range buckets {
		c := retentionCounts{RetentionMsgs: b.Retention, CompletedRetentionMsgs: b.Completed,
			EvictionMsgs: b.Eviction, TotalMsgs: b.Total, EventCount: b.Events}
		a.Series[i] = retentionPoint{msStamp(b.Bucket), c}
		a.Totals.add(c)
	}
	writeJSON(w, http.StatusOK, a)
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
	a := systemMetricsAnswer{analyticsEnvelope: env, Replicas: []systemReplica{}}
	for _, b := range brokerBuckets(minutes, bm) {
		if host != "" && b.hostname != host {
			continue
		}
		series := make([]systemPoint, len(b.buckets))
		for i, k := range b.buckets {
			series[i] = newSystemPoint(k)
		}
		a.PointCount += len(series)
		a.Replicas = append(a.Replicas, systemReplica{Hostname: b.hostname, Port: b.port, WorkerID: b.id, TimeSeries: series})
	}
	a.ReplicaCount = len(a.Replicas)
	writeJSON(w, http.StatusOK, a)
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
	a := workerMetricsAnswer{analyticsEnvelope: env, PointCount: len(points), TimeSeries: make([]workerPoint, len(points)),
		Workers: []workerTotals{}, Queues: queueLagRows(buckets)}
	var total clusterBucket
	for i, p := range points { // newest first, as Queen's page expects (it reverses them)
		a.TimeSeries[len(points)-1-i] = newWorkerPoint(p, bm)
		total.add(p)
	}
	for _, b := range brokerBuckets(minutes, bm) {
		a.Workers = append(a.Workers, workerTotals{Hostname: b.hostname, Port: b.port, WorkerID: b.id,
			Requests: b.requests, PushRequests: b.push, PopRequests: b.pop, AckRequests: b.ack, LastSeen: msStamp(b.last),
			Latency: b.latency.summary(), workerGauges: newWorkerGauges(b)})
	}
	t := total.q
	a.Summary = workerSummary{TotalPushMessages: t.PushMessages, TotalPopMessages: t.PopMessages,
		TotalAckMessages: completed(t) + t.AckFailed, TotalPushRequests: t.PushRequests,
		TotalPopRequests: t.PopRequests, TotalAckRequests: t.AckRequests, PendingMessages: o.Pending}
	writeJSON(w, http.StatusOK, a)
}

// queueLagRows are the queues' pops and lag over a window, by name.
func queueLagRows(buckets []store.QueueBucket) []queueLagRow {
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
	out := []queueLagRow{}
	for _, n := range names {
		a := by[n]
		out = append(out, queueLagRow{QueueName: n, PopCount: a.pops, AvgLagMs: avgLag(a.sum, a.n), MaxLagMs: a.max})
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
