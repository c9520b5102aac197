// Package analytics records what a broker does, minute by minute, for the
// analytics and status routes and the dashboard.
//
// The contract: the request path only adds to counters in memory (a map
// entry per queue and minute, under one mutex); once a minute the Flusher
// writes every closed minute to PostgreSQL in one statement
// (store.RecordMinutes), each row the broker's whole minute, so a flush
// retried after a lost answer counts once. A minute that cannot be
// written stays pending, up to MaxPendingMinutes, then the oldest is
// dropped and counted. Nothing is sampled or invented: a series has a
// point only for a minute something happened.
package analytics

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/queen/store"
)

// latencyBoundsMs are the upper bounds of the request latency histogram a
// minute keeps, for its p50 and p99 (the bound of the bucket the rank
// falls in; the last bucket is the minute's maximum).
var latencyBoundsMs = [...]float64{0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000}

// Recorder aggregates one broker's minutes in memory. The zero value is
// not usable; use NewRecorder. Every method is safe for concurrent use,
// and the recording methods of a nil *Recorder do nothing.
type Recorder struct {
	maxQueues int

	mu      sync.Mutex
	queues  map[queueKey]*store.QueueMinute
	brokers map[int64]*brokerMinute
	dropped int64 // queue rows refused past maxQueues in their minute
	perMin  map[int64]int

	droppedMinutes atomic.Int64 // minutes a flusher dropped unwritten
}

type queueKey struct {
	minute        int64
	tenant, queue string
}

type brokerMinute struct {
	m      store.BrokerMinute
	hist   [len(latencyBoundsMs) + 1]int64
	gauges map[string]map[string]*Gauge // group, then name
}

// Gauge is one gauge over a minute's samples.
type Gauge struct {
	Avg, Min, Max, Last float64
	sum                 float64
	n                   int
}

func (g *Gauge) add(v float64) {
	if g.n == 0 || v < g.Min {
		g.Min = v
	}
	if g.n == 0 || v > g.Max {
		g.Max = v
	}
	g.n++
	g.sum += v
	g.Last = v
	g.Avg = g.sum / float64(g.n)
}

// NewRecorder returns a recorder keeping at most maxQueues queue rows per
// minute (queue names are chosen by clients; later queues of that minute
// are counted in Dropped, not recorded). maxQueues <= 0 means 10,000.
func NewRecorder(maxQueues int) *Recorder {
	if maxQueues <= 0 {
		maxQueues = 10000
	}
	return &Recorder{maxQueues: maxQueues, queues: map[queueKey]*store.QueueMinute{},
		brokers: map[int64]*brokerMinute{}, perMin: map[int64]int{}}
}

func minuteOf(t time.Time) int64 { return t.Unix() / 60 }

// queue returns the minute's row of a queue, nil past maxQueues. Called
// with r.mu held.
func (r *Recorder) queue(now time.Time, tenant, queue string) *store.QueueMinute {
	k := queueKey{minute: minuteOf(now), tenant: tenant, queue: queue}
	q := r.queues[k]
	if q == nil {
		if r.perMin[k.minute] >= r.maxQueues {
			r.dropped++
			return nil
		}
		r.perMin[k.minute]++
		q = &store.QueueMinute{Minute: time.Unix(k.minute*60, 0).UTC(), Tenant: tenant, Queue: queue}
		r.queues[k] = q
	}
	return q
}

// broker returns the minute's own row. Called with r.mu held.
func (r *Recorder) broker(now time.Time) *brokerMinute {
	m := minuteOf(now)
	b := r.brokers[m]
	if b == nil {
		b = &brokerMinute{m: store.BrokerMinute{Minute: time.Unix(m*60, 0).UTC()}, gauges: map[string]map[string]*Gauge{}}
		r.brokers[m] = b
	}
	return b
}

// Pushed counts one push request's messages queued on a queue.
func (r *Recorder) Pushed(now time.Time, tenant, queue string, messages int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.queue(now, tenant, queue); q != nil {
		q.PushRequests++
		q.PushMessages += int64(messages)
	}
	r.broker(now).m.PushMessages += int64(messages)
}

// Popped counts one pop of a queue: its messages (none: an empty pop) and
// the age of each when popped, as a sum and a maximum in milliseconds.
func (r *Recorder) Popped(now time.Time, tenant, queue string, messages int, ageSumMs, ageMaxMs int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.queue(now, tenant, queue); q != nil {
		q.PopRequests++
		if messages == 0 {
			q.PopEmpty++
		}
		q.PopMessages += int64(messages)
		q.LagSumMs += ageSumMs
		q.LagCount += int64(messages)
		q.LagMaxMs = max(q.LagMaxMs, ageMaxMs)
	}
	r.broker(now).m.PopMessages += int64(messages)
}

// Acked counts one ack request's items on a queue: completed, failed, and
// of the failed, those dead-lettered.
func (r *Recorder) Acked(now time.Time, tenant, queue string, success, failed, dlq int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.queue(now, tenant, queue); q != nil {
		q.AckRequests++
		q.AckSuccess += int64(success)
		q.AckFailed += int64(failed)
		q.DLQ += int64(dlq)
	}
	r.broker(now).m.AckMessages += int64(success + failed)
}

// AutoAcked counts the messages an autoAck pop completed: acked with no
// ack request.
func (r *Recorder) AutoAcked(now time.Time, tenant, queue string, messages int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.queue(now, tenant, queue); q != nil {
		q.AutoAcked += int64(messages)
	}
	r.broker(now).m.AckMessages += int64(messages)
}

// Route kinds for Request.
const (
	RouteOther = iota
	RoutePush
	RoutePop
	RouteAck
)

// Request counts one HTTP request this broker answered: its kind, how
// long it took and its status (5xx counts as a server error).
func (r *Recorder) Request(now time.Time, kind int, took time.Duration, status int) {
	if r == nil {
		return
	}
	ms := float64(took.Microseconds()) / 1000
	i := sort.SearchFloat64s(latencyBoundsMs[:], ms)
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.broker(now)
	b.m.Requests++
	switch kind {
	case RoutePush:
		b.m.PushRequests++
	case RoutePop:
		b.m.PopRequests++
	case RouteAck:
		b.m.AckRequests++
	}
	if status >= 500 {
		b.m.ServerErrors++
	}
	b.m.LatencyCount++
	b.m.LatencySumMs += ms
	b.m.LatencyMaxMs = max(b.m.LatencyMaxMs, ms)
	b.hist[i]++
}

// DBError counts a database failure a request met.
func (r *Recorder) DBError(now time.Time) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.broker(now).m.DBErrors++
}

// Sample adds gauge samples to the minute: group then name, as
// system-metrics answers them (cpu.user_us, memory.rss_bytes, ...), and the
// CPU time used since the last sample.
func (r *Recorder) Sample(now time.Time, cpuUserUs, cpuSysUs int64, gauges map[string]map[string]float64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.broker(now)
	b.m.Samples++
	b.m.CPUUserUs += cpuUserUs
	b.m.CPUSysUs += cpuSysUs
	for group, vs := range gauges {
		if b.gauges[group] == nil {
			b.gauges[group] = map[string]*Gauge{}
		}
		for name, v := range vs {
			g := b.gauges[group][name]
			if g == nil {
				g = &Gauge{}
				b.gauges[group][name] = g
			}
			g.add(v)
		}
	}
}

// DroppedMinutes is how many minutes were dropped unwritten (PostgreSQL
// refused their writes for MaxPendingMinutes).
func (r *Recorder) DroppedMinutes() int64 { return r.droppedMinutes.Load() }

// Dropped is how many queue rows were refused for being past maxQueues.
func (r *Recorder) Dropped() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Take removes and returns every minute before the one of until: the
// closed minutes (until = now), or all of them (until past now, at a
// shutdown). Queue rows are in (minute, tenant, queue) order.
func (r *Recorder) Take(until time.Time) ([]store.QueueMinute, []store.BrokerMinute) {
	end := minuteOf(until)
	r.mu.Lock()
	defer r.mu.Unlock()
	var qs []store.QueueMinute
	for k, q := range r.queues {
		if k.minute < end {
			qs = append(qs, *q)
			delete(r.queues, k)
		}
	}
	for m := range r.perMin {
		if m < end {
			delete(r.perMin, m)
		}
	}
	var bs []store.BrokerMinute
	for m, b := range r.brokers {
		if m < end {
			bs = append(bs, b.close())
			delete(r.brokers, m)
		}
	}
	sort.Slice(qs, func(i, j int) bool {
		a, b := qs[i], qs[j]
		if !a.Minute.Equal(b.Minute) {
			return a.Minute.Before(b.Minute)
		}
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		return a.Queue < b.Queue
	})
	sort.Slice(bs, func(i, j int) bool { return bs[i].Minute.Before(bs[j].Minute) })
	return qs, bs
}

// close finishes a minute: its latency percentiles and its gauges.
func (b *brokerMinute) close() store.BrokerMinute {
	m := b.m
	m.LatencyP50Ms, m.LatencyP99Ms = b.rank(0.50), b.rank(0.99)
	m.Gauges = encodeGauges(b.gauges)
	return m
}

// rank is the upper bound of the histogram bucket holding quantile q (the
// maximum for the last bucket, and never above it).
func (b *brokerMinute) rank(q float64) float64 {
	if b.m.LatencyCount == 0 {
		return 0
	}
	want := int64(q*float64(b.m.LatencyCount-1)) + 1
	var seen int64
	for i, n := range b.hist {
		if seen += n; seen >= want {
			if i < len(latencyBoundsMs) {
				return min(latencyBoundsMs[i], b.m.LatencyMaxMs)
			}
			break
		}
	}
	return b.m.LatencyMaxMs
}
