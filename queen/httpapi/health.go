package httpapi

import (
	"context"
	"net/http"
	"runtime"
)

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DBConnectionTimeout)
	defer cancel()
	body := map[string]any{"server": "queen-go", "version": Version, "serverId": s.cfg.ServerID}
	if err := s.store.Ping(ctx); err != nil {
		body["status"], body["database"], body["error"] = "unhealthy", "disconnected", err.Error()
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	body["status"], body["database"] = "healthy", "connected"
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	uptime := s.clock.Now().Sub(s.started).Seconds()
	rate := func(n int64) float64 {
		if uptime <= 0 {
			return 0
		}
		return float64(n) / uptime
	}
	st := s.store.Pool().Stat()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	req, pushed := s.stats.requests.Load(), s.stats.pushMessages.Load()
	writeJSON(w, http.StatusOK, map[string]any{
		"uptime":   uptime,
		"requests": map[string]any{"total": req, "rate": rate(req)},
		"messages": map[string]any{"total": pushed, "rate": rate(pushed),
			"pushed": pushed, "popped": s.stats.popMessages.Load(), "acked": s.stats.ackMessages.Load(),
			"dlq": s.stats.dlq.Load()},
		"transactions": s.stats.transactions.Load(),
		"database": map[string]any{"poolSize": st.MaxConns(), "idleConnections": st.IdleConns(),
			"activeConnections": st.AcquiredConns(), "acquireWaitsTotal": st.EmptyAcquireCount(),
			"errors": s.stats.dbErrors.Load()},
		"memory": map[string]any{"heapAlloc": mem.HeapAlloc, "heapSys": mem.HeapSys, "sys": mem.Sys,
			"numGC": mem.NumGC},
		"cpu":        map[string]any{"goroutines": runtime.NumGoroutine(), "cpus": runtime.NumCPU()},
		"serverId":   s.cfg.ServerID,
		"observedAt": timestamp(s.clock.Now()),
	})
}
