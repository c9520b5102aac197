package analytics

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// PoolGauges reads the database pool: its size, idle and in-use
// connections.
type PoolGauges func() (size, idle, active int)

// WorkGauges reads the broker's queued work: database work waiting for an
// admission slot (queen/admission; what Queen calls its job queue) and
// long-poll pops parked until a push wakes them or they time out (Queen's
// backoff).
type WorkGauges func() (dbWaiting, parkedPops int)

// ProcessSampler samples this process: CPU time (getrusage), resident and
// virtual memory (/proc/self/statm, where there is one), goroutines and
// heap, the pool, and the queued work. pool and work may be nil.
func ProcessSampler(pool PoolGauges, work WorkGauges) Sampler {
	page := float64(os.Getpagesize())
	return func() (int64, int64, map[string]map[string]float64) {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		user := ru.Utime.Sec*1e6 + int64(ru.Utime.Usec)
		sys := ru.Stime.Sec*1e6 + int64(ru.Stime.Usec)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		g := map[string]map[string]float64{
			"runtime": {"goroutines": float64(runtime.NumGoroutine()), "heap_bytes": float64(ms.HeapAlloc)},
		}
		if b, err := os.ReadFile("/proc/self/statm"); err == nil {
			if f := strings.Fields(string(b)); len(f) >= 2 {
				virt, _ := strconv.ParseFloat(f[0], 64)
				rss, _ := strconv.ParseFloat(f[1], 64)
				g["memory"] = map[string]float64{"rss_bytes": rss * page, "virtual_bytes": virt * page}
			}
		}
		if pool != nil {
			size, idle, active := pool()
			g["database"] = map[string]float64{"pool_size": float64(size), "pool_idle": float64(idle), "pool_active": float64(active)}
		}
		if work != nil {
			waiting, parked := work()
			g["work"] = map[string]float64{"db_waiting": float64(waiting), "parked_pops": float64(parked)}
		}
		return user, sys, g
	}
}
