package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times on Linux.
const clockTicks = 100

// cpuSeconds reads a process's user+system time, plus that of its reaped
// children (cutime, cstime) when withChildren: PostgreSQL's exited backends
// are counted in the postmaster's.
func cpuSeconds(pid int, withChildren bool) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// After the command: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	sum := 0.0
	idx := []int{11, 12}
	if withChildren {
		idx = append(idx, 13, 14)
	}
	for _, i := range idx {
		v, _ := strconv.ParseFloat(f[i], 64)
		sum += v
	}
	return sum / clockTicks
}

// pgCPU is the CPU time of the postmaster and every live child of it.
func pgCPU(postmaster int) float64 {
	total := cpuSeconds(postmaster, true)
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && f[1] == strconv.Itoa(postmaster) {
			total += cpuSeconds(pid, false)
		}
	}
	return total
}

// hasZombieChild reports whether a child of pid has exited and is not yet
// reaped (its CPU time not yet in pid's children's time).
func hasZombieChild(pid int) bool {
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		child, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

// cpuMark is a reading of both processes' CPU time.
type cpuMark struct{ broker, pg float64 }

func (e *env) cpu() cpuMark {
	return cpuMark{broker: cpuSeconds(e.broker.Process.Pid, false), pg: pgCPU(e.pgPID)}
}

// mark is a reading at a window's edge: CPU time and the WAL position in
// bytes.
type mark struct {
	cpuMark
	wal int64
}

// walPosition is pg_current_wal_lsn() in bytes.
func (e *env) walPosition(ctx context.Context) (int64, error) {
	var lsn int64
	if err := e.pool.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&lsn); err != nil {
		return 0, fmt.Errorf("wal position: %w", err)
	}
	return lsn, nil
}

// markBefore reads the WAL position, then CPU time, and markAfter the
// other way round: the query that reads the position stays outside the
// window's CPU (it writes no WAL).
func (e *env) markBefore(ctx context.Context) (mark, error) {
	wal, err := e.walPosition(ctx)
	return mark{cpuMark: e.cpu(), wal: wal}, err
}

func (e *env) markAfter(ctx context.Context) (mark, error) {
	c := e.cpu()
	wal, err := e.walPosition(ctx)
	return mark{cpuMark: c, wal: wal}, err
}

// checkpoint runs a CHECKPOINT before a window: each window then pays for
// the full-page writes of the pages it touches first, instead of whichever
// window a timed checkpoint happens to precede.
func (e *env) checkpoint(ctx context.Context) error {
	if _, err := e.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// tally adds up one side's windows of a workload: rates, messages, and
// PostgreSQL's CPU, the side's own process CPU (the broker's, River's) and
// WAL over them.
type tally struct {
	rates              []float64
	msgs, pg, own, wal float64
	// stmts, hits and reads are the top-level statements and their shared
	// buffer hits and reads, counted only in the grown mode (-grown).
	stmts, hits, reads float64
}

func (t *tally) add(n int64, secs float64, before, after mark, own float64) {
	t.rates = append(t.rates, float64(n)/secs)
	t.msgs += float64(n)
	t.pg += after.pg - before.pg
	t.own += own
	t.wal += float64(after.wal - before.wal)
}

// per1k is x per 1,000 messages.
func (t tally) per1k(x float64) float64 {
	if t.msgs == 0 {
		return 0
	}
	return 1000 * x / t.msgs
}

func (t tally) walPerMsg() float64 {
	if t.msgs == 0 {
		return 0
	}
	return t.wal / t.msgs
}

// window runs op from workers goroutines for d and returns how many items
// they completed, and the first error.
func window(ctx context.Context, d time.Duration, workers int, op func(ctx context.Context, worker int, iter int) (int, error)) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				n, err := op(ctx, w, i)
				if err != nil {
					if ctx.Err() == nil {
						once.Do(func() { firstErr = err })
						cancel()
					}
					return
				}
				done.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	return done.Load(), firstErr
}

// httpClient is a keep-alive client for many concurrent workers.
type httpClient struct{ c *http.Client }

func newHTTPClient() *httpClient {
	return &httpClient{c: &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512}}}
}

func (h *httpClient) do(ctx context.Context, method, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
