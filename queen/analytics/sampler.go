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

// ProcessSampler samples this process: CPU time (getrusage), resident and
// virtual memory (/proc/self/statm, where there is one), goroutines and
// heap, and the pool.
func ProcessSampler(pool PoolGauges) Sampler {
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
		return user, sys, g
	}
}
