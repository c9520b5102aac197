package httpapi

import (
	"sort"

	"github.com/queen-go/queen/queen/store"
)

// A broker records, per minute, its requests' count, summed latency,
// maximum and the minute's own p50 and p99 (from a fixed-bucket
// histogram that is not stored). A window's figures are built from those
// minutes: the average and the maximum exactly; p50 and p99 as the
// request-weighted median of the minutes' p50 and p99 (the percentile of
// a typical request's minute); worstP99 as the highest minute's p99.

// latencySummary is one broker's request latency over a window or a
// bucket, in milliseconds.
type latencySummary struct {
	Requests int64   `json:"requests"` // requests timed
	AvgMs    float64 `json:"avgMs"`
	P50Ms    float64 `json:"p50Ms"`
	P99Ms    float64 `json:"p99Ms"`
	WorstP99 float64 `json:"worstMinuteP99Ms"`
	MaxMs    float64 `json:"maxMs"`
	Minutes  int     `json:"minutes"` // recorded minutes with a timed request
}

// latencyMinutes gathers the minutes of one broker (or bucket).
type latencyMinutes []store.BrokerMinute

// add keeps m when it timed a request.
func (l *latencyMinutes) add(m store.BrokerMinute) {
	if m.LatencyCount > 0 {
		*l = append(*l, m)
	}
}

// summary is l's latencySummary.
func (l latencyMinutes) summary() latencySummary {
	var s latencySummary
	var sum float64
	for _, m := range l {
		s.Requests += m.LatencyCount
		sum += m.LatencySumMs
		s.MaxMs = max(s.MaxMs, m.LatencyMaxMs)
		s.WorstP99 = max(s.WorstP99, m.LatencyP99Ms)
	}
	s.Minutes = len(l)
	if s.Requests == 0 {
		return s
	}
	s.AvgMs = sum / float64(s.Requests)
	s.P50Ms = l.weightedMedian(func(m store.BrokerMinute) float64 { return m.LatencyP50Ms })
	s.P99Ms = l.weightedMedian(func(m store.BrokerMinute) float64 { return m.LatencyP99Ms })
	return s
}

// weightedMedian is the value of the minute holding the middle request
// when the minutes are ordered by that value.
func (l latencyMinutes) weightedMedian(of func(store.BrokerMinute) float64) float64 {
	ms := append(latencyMinutes(nil), l...)
	sort.SliceStable(ms, func(i, j int) bool { return of(ms[i]) < of(ms[j]) })
	var total, seen int64
	for _, m := range ms {
		total += m.LatencyCount
	}
	for _, m := range ms {
		seen += m.LatencyCount
		if 2*seen >= total {
			return of(m)
		}
	}
	return 0
}
