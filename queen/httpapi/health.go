package httpapi

import (
	"context"
	"errors"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/queen-go/queen/queen/store"
)

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DBConnectionTimeout)
	defer cancel()
	body := healthStatus{Server: "queen-go", Version: Version, ServerID: s.cfg.ServerID}
	if err := s.ping(ctx); err != nil {
		msg := err.Error()
		body.Status, body.Database, body.Error = "unhealthy", "disconnected", &msg
		if errors.Is(err, store.ErrReadOnly) {
			body.Database = "read-only"
		}
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	body.Status, body.Database = "healthy", "connected"
	writeJSON(w, http.StatusOK, body)
}

// databaseReadOnly is whether the database was last seen read-only; while
// it was, a scrape asks again, so the gauge clears once a writable primary
// answers even when nothing else pings.
func (s *Server) databaseReadOnly() bool {
	w := s.store.ReadOnlyWatch()
	if !w.ReadOnly() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DBConnectionTimeout)
	defer cancel()
	_ = s.store.Ping(ctx)
	return w.ReadOnly()
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	uptime := s.clock.Now().Sub(s.started).Seconds()
	rate := func(n int64) float64 {
		if uptime <= 0 {
			return 0
		}
		return float64(n) / uptime
	}
	st := s.pools()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	req, pushed := s.stats.requests.Load(), s.stats.pushMessages.Load()
	user, system := cpuTimes()
	writeJSON(w, http.StatusOK, brokerMetrics{
		Uptime:   uptime,
		Requests: requestCounts{Total: req, Rate: rate(req)},
		Messages: messageCounts{Total: pushed, Rate: rate(pushed),
			Pushed: pushed, Popped: s.stats.popMessages.Load(), Acked: s.stats.ackMessages.Load(),
			DLQ: s.stats.dlq.Load()},
		Transactions: s.stats.transactions.Load(),
		Database: databaseMetrics{PoolSize: st.size, IdleConnections: st.idle,
			WaitingRequests: s.waitingForSlots(), ActiveConnections: st.acquired,
			AcquireWaitsTotal: st.emptyAcquires, Errors: s.stats.dbErrors.Load()},
		Memory: memoryMetrics{RSS: rssBytes(), HeapTotal: mem.HeapSys, HeapUsed: mem.HeapAlloc,
			Sys: mem.Sys, NumGC: mem.NumGC},
		CPU: cpuMetrics{User: user.Microseconds(), System: system.Microseconds(),
			Goroutines: runtime.NumGoroutine(), CPUs: runtime.NumCPU()},
		ServerID:   s.cfg.ServerID,
		ObservedAt: timestamp(s.clock.Now()),
	})
}

// waitingForSlots is the database work waiting for an admission slot.
func (s *Server) waitingForSlots() int {
	if s.arbiter == nil {
		return 0
	}
	n := 0
	for _, w := range s.arbiter.Stats().Waiting {
		n += w
	}
	return n
}

// cpuTimes is the process's user and system CPU time.
func cpuTimes() (user, system time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// rssBytes is the resident set size from /proc (Linux); 0 elsewhere.
func rssBytes() int64 {
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
