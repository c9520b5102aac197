package httpapi

import (
	"net/http"
	"time"
)

// The /api/v1/analytics/* routes (contract-admin.md 4.7). This broker
// records no per-minute worker, queue or system metrics, so those series
// are empty but well-formed, with the envelope computed from the request;
// retention comes from the history the retention pass writes, and
// postgres-stats from PostgreSQL's statistics views. Nothing is invented.

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

// queueLag is GET /api/v1/analytics/queue-lag: a top-level array of
// per-minute lag rows, none recorded here.
func (s *Server) queueLag(w http.ResponseWriter, r *http.Request) {
	if _, _, _, _, ok := s.analyticsWindow(w, r); ok {
		writeJSON(w, http.StatusOK, []any{})
	}
}

// queueOps is GET /api/v1/analytics/queue-ops: no series, the tenant's
// queue names (one when queue is given).
func (s *Server) queueOps(w http.ResponseWriter, r *http.Request) {
	_, _, _, env, ok := s.analyticsWindow(w, r)
	if !ok {
		return
	}
	qs, err := s.store.ListQueues(r.Context(), tenantOf(r))
	if err != nil {
		s.storeError(w, r, "queue ops", err)
		return
	}
	names := []string{}
	for _, q := range filterQueues(qs, r) {
		names = append(names, q.Name)
	}
	env["series"], env["queues"] = []any{}, names
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

// systemMetrics is GET /api/v1/analytics/system-metrics.
func (s *Server) systemMetrics(w http.ResponseWriter, r *http.Request) {
	if _, _, _, env, ok := s.analyticsWindow(w, r); ok {
		env["replicas"], env["replicaCount"], env["pointCount"] = []any{}, 0, 0
		writeJSON(w, http.StatusOK, env)
	}
}

// workerMetrics is GET /api/v1/analytics/worker-metrics: no series; the
// summary's pending count is live.
func (s *Server) workerMetrics(w http.ResponseWriter, r *http.Request) {
	_, _, _, env, ok := s.analyticsWindow(w, r)
	if !ok {
		return
	}
	o, err := s.store.Overview(r.Context(), tenantOf(r))
	if err != nil {
		s.storeError(w, r, "worker metrics", err)
		return
	}
	env["pointCount"], env["timeSeries"], env["workers"], env["queues"] = 0, []any{}, []any{}, []any{}
	env["summary"] = map[string]any{"totalPushMessages": 0, "totalPopMessages": 0, "totalAckMessages": 0,
		"totalPushRequests": 0, "totalPopRequests": 0, "totalAckRequests": 0, "pendingMessages": o.Pending}
	writeJSON(w, http.StatusOK, env)
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
