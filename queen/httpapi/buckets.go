package httpapi

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/queen-go/queen/queen/analytics"
	"github.com/queen-go/queen/queen/store"
)

// Re-bucketing the recorded minutes for the analytics and status routes.

// bucketOf floors t to a bucket of bm minutes.
func bucketOf(t time.Time, bm int) time.Time {
	w := int64(bm) * 60
	return time.Unix(t.Unix()/w*w, 0).UTC()
}

// gaugeSet is a minute's or a bucket's gauges, by group then name.
type gaugeSet map[string]map[string]analytics.Leaf

// brokerBucket is one broker's gauges over one bucket.
type brokerBucket struct {
	at      time.Time
	samples int
	gauges  gaugeSet
	latency latencyMinutes
}

// brokerSeries is one broker's buckets and totals over a window.
type brokerSeries struct {
	id, hostname   string
	port           int
	requests, push int64
	pop, ack       int64
	last           time.Time
	buckets        []brokerBucket
	work           workGauges // its newest minute's
	poolActive     float64    // likewise: busy connections
	latency        latencyMinutes
}

// brokerBuckets groups minutes (oldest first) by broker, then by bucket:
// a bucket's gauge is the sample-weighted mean of its minutes' means, the
// least minimum, the greatest maximum and the newest last.
func brokerBuckets(minutes []store.BrokerMinute, bm int) []*brokerSeries {
	by := map[string]*brokerSeries{}
	var out []*brokerSeries
	for _, m := range minutes {
		b := by[m.Broker]
		if b == nil {
			b = &brokerSeries{id: m.Broker}
			by[m.Broker] = b
			out = append(out, b)
		}
		b.hostname, b.port, b.last = m.Hostname, m.Port, m.Minute
		b.requests, b.push, b.pop, b.ack = b.requests+m.Requests, b.push+m.PushRequests, b.pop+m.PopRequests, b.ack+m.AckRequests
		at := bucketOf(m.Minute, bm)
		if n := len(b.buckets); n == 0 || !b.buckets[n-1].at.Equal(at) {
			b.buckets = append(b.buckets, brokerBucket{at: at, gauges: gaugeSet{}})
		}
		k := &b.buckets[len(b.buckets)-1]
		var g gaugeSet
		if json.Unmarshal(m.Gauges, &g) == nil {
			k.merge(g, m.Samples)
			b.work, b.poolActive = workOf(g), g["database"]["pool_active"].Avg
		}
		k.samples += m.Samples
		k.latency.add(m)
		b.latency.add(m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (k *brokerBucket) merge(g gaugeSet, samples int) {
	for group, names := range g {
		if k.gauges[group] == nil {
			k.gauges[group] = map[string]analytics.Leaf{}
		}
		for name, l := range names {
			old, seen := k.gauges[group][name]
			if !seen || k.samples+samples == 0 {
				k.gauges[group][name] = l
				continue
			}
			w0, w1 := float64(k.samples), float64(samples)
			k.gauges[group][name] = analytics.Leaf{Avg: (old.Avg*w0 + l.Avg*w1) / (w0 + w1),
				Min: min(old.Min, l.Min), Max: max(old.Max, l.Max), Last: l.Last}
		}
	}
}

// clusterBucket is one bucket of the tenant's queues (summed) with the
// brokers' own figures of that bucket.
type clusterBucket struct {
	at                     time.Time
	q                      store.QueueBucket
	requests, dbErrors     int64
	latencyCount           int64
	latencySum, p99Latency float64
	cpuUserUs, cpuSysUs    int64
	brokers                map[string]bool
	rssBytes               float64 // summed over the brokers' means
	poolActive, poolIdle   float64
	poolSize               float64
	work                   workGauges // summed over the brokers
}

// workGauges are a bucket's pool and queued-work figures as Queen's worker
// metrics name them: free slots are idle pool connections, the job queue
// is database work waiting for an admission slot, backoff the parked
// long-poll pops (analytics.WorkGauges).
type workGauges struct {
	freeSlotsAvg, freeSlotsMin float64
	jobQueueAvg, jobQueueMax   float64
	parkedAvg                  float64
}

// workOf reads a minute's or a bucket's work gauges.
func workOf(g gaugeSet) workGauges {
	return workGauges{freeSlotsAvg: g["database"]["pool_idle"].Avg, freeSlotsMin: g["database"]["pool_idle"].Min,
		jobQueueAvg: g["work"]["db_waiting"].Avg, jobQueueMax: g["work"]["db_waiting"].Max,
		parkedAvg: g["work"]["parked_pops"].Avg}
}

// plus sums two brokers' figures.
func (w workGauges) plus(o workGauges) workGauges {
	return workGauges{freeSlotsAvg: w.freeSlotsAvg + o.freeSlotsAvg, freeSlotsMin: w.freeSlotsMin + o.freeSlotsMin,
		jobQueueAvg: w.jobQueueAvg + o.jobQueueAvg, jobQueueMax: w.jobQueueMax + o.jobQueueMax,
		parkedAvg: w.parkedAvg + o.parkedAvg}
}

func (c *clusterBucket) avgLatency() float64 {
	if c.latencyCount == 0 {
		return 0
	}
	return c.latencySum / float64(c.latencyCount)
}

// add sums another bucket into c (the window's totals).
func (c *clusterBucket) add(o clusterBucket) {
	c.q = sumQueueBuckets(c.q, o.q)
	c.requests, c.dbErrors = c.requests+o.requests, c.dbErrors+o.dbErrors
}

func sumQueueBuckets(a, b store.QueueBucket) store.QueueBucket {
	a.PushRequests += b.PushRequests
	a.PushMessages += b.PushMessages
	a.PopRequests += b.PopRequests
	a.PopMessages += b.PopMessages
	a.PopEmpty += b.PopEmpty
	a.AckRequests += b.AckRequests
	a.AckSuccess += b.AckSuccess
	a.AckFailed += b.AckFailed
	a.DLQ += b.DLQ
	a.AutoAcked += b.AutoAcked
	a.LagSumMs += b.LagSumMs
	a.LagCount += b.LagCount
	a.LagMaxMs = max(a.LagMaxMs, b.LagMaxMs)
	a.Pending = max(a.Pending, 0) + max(b.Pending, 0)
	return a
}

// clusterBuckets joins the tenant's queue buckets (summed over queues)
// and the brokers' minutes (bucketed) by bucket, oldest first. A bucket
// with no queue row but broker minutes is kept: the brokers ran.
func clusterBuckets(qs []store.QueueBucket, minutes []store.BrokerMinute, bm int) []clusterBucket {
	by := map[time.Time]*clusterBucket{}
	get := func(at time.Time) *clusterBucket {
		c := by[at]
		if c == nil {
			c = &clusterBucket{at: at, brokers: map[string]bool{}}
			by[at] = c
		}
		return c
	}
	for _, q := range qs {
		c := get(q.Bucket)
		c.q = sumQueueBuckets(c.q, q)
	}
	type pool struct {
		active, idle, size, rss float64
		work                    workGauges
	}
	pools := map[time.Time]map[string]pool{}
	for _, m := range minutes {
		c := get(bucketOf(m.Minute, bm))
		c.requests, c.dbErrors = c.requests+m.Requests, c.dbErrors+m.DBErrors
		c.latencyCount, c.latencySum = c.latencyCount+m.LatencyCount, c.latencySum+m.LatencySumMs
		c.p99Latency = max(c.p99Latency, m.LatencyP99Ms)
		c.cpuUserUs, c.cpuSysUs = c.cpuUserUs+m.CPUUserUs, c.cpuSysUs+m.CPUSysUs
		c.brokers[m.Broker] = true
		var g gaugeSet
		if json.Unmarshal(m.Gauges, &g) != nil {
			continue
		}
		if pools[c.at] == nil {
			pools[c.at] = map[string]pool{}
		}
		// The broker's last minute of the bucket stands for it.
		pools[c.at][m.Broker] = pool{g["database"]["pool_active"].Avg, g["database"]["pool_idle"].Avg,
			g["database"]["pool_size"].Last, g["memory"]["rss_bytes"].Avg, workOf(g)}
	}
	out := make([]clusterBucket, 0, len(by))
	for at, c := range by {
		for _, p := range pools[at] {
			c.poolActive, c.poolIdle, c.poolSize, c.rssBytes = c.poolActive+p.active, c.poolIdle+p.idle, c.poolSize+p.size, c.rssBytes+p.rss
			c.work = c.work.plus(p.work)
		}
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}
