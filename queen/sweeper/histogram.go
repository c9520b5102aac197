package sweeper

import (
	"math"
	"sync"
)

// LatenessBuckets are the upper bounds (ms) of the lateness histogram.
var LatenessBuckets = []float64{5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}

// Histogram counts observations into LatenessBuckets (cumulative on read).
type Histogram struct {
	mu     sync.Mutex
	counts [14]int64 // one per bucket, then +Inf
	sum    float64
	n      int64
}

// Observe records one value.
func (h *Histogram) Observe(v float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := len(LatenessBuckets)
	for j, b := range LatenessBuckets {
		if v <= b {
			i = j
			break
		}
	}
	h.counts[i]++
	h.sum += v
	h.n++
}

// Snapshot returns the cumulative count at or below each bucket (the last
// is +Inf), the sum and the count.
func (h *Histogram) Snapshot() (cumulative []int64, sum float64, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var c int64
	for _, k := range h.counts {
		c += k
		cumulative = append(cumulative, c)
	}
	if math.IsNaN(h.sum) {
		return cumulative, 0, h.n
	}
	return cumulative, h.sum, h.n
}
