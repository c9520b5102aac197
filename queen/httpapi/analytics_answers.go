package httpapi

import (
	"github.com/queen-go/queen/queen/store"
	"math"
)

// The answers of the /api/v1/analytics/* routes (contract-admin.md 4.7).
// Fields the broker does not record (Queen's event-loop, thread-pool and
// parked-poll figures) are literal zeros, kept so Queen's dashboard and
// queenctl find every key.

// analyticsRange is the window an analytics answer covers, as asked.
type analyticsRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// analyticsEnvelope opens every windowed analytics answer but queue-lag.
type analyticsEnvelope struct {
	TimeRange     analyticsRange `json:"timeRange"`
	BucketMinutes int            `json:"bucketMinutes"` // the width of each series point
}

// queueLagRow is a queue's pops and their lag: a bucket's in queue-lag, the
// window's in worker-metrics.
type queueLagRow struct {
	QueueName string  `json:"queueName"`
	PopCount  int64   `json:"popCount"`
	AvgLagMs  float64 `json:"avgLagMs"` // mean age of the popped messages
	MaxLagMs  int64   `json:"maxLagMs"`
}

// queueLagBucket is one element of the queue-lag answer, a top-level array.
type queueLagBucket struct {
	queueLagRow
	BucketTime string `json:"bucketTime"`
}

// queueOpsAnswer is the queue-ops answer.
type queueOpsAnswer struct {
	analyticsEnvelope
	Series []queueOpsPoint `json:"series"`
	Queues []string        `json:"queues"` // the tenant's queue names
}

// queueOpsPoint is one queue's recorded bucket.
type queueOpsPoint struct {
	Bucket            string  `json:"bucket"`
	QueueName         string  `json:"queueName"`
	PushRequests      int64   `json:"pushRequests"`
	PushMessages      int64   `json:"pushMessages"`
	PopMessages       int64   `json:"popMessages"`
	PopEmpty          int64   `json:"popEmpty"` // pops that found nothing
	AckRequests       int64   `json:"ackRequests"`
	AckSuccess        int64   `json:"ackSuccess"` // completed: successful acks and autoAck pops
	AckFailed         int64   `json:"ackFailed"`
	AutoAcked         int64   `json:"autoAcked"`
	Transactions      int     `json:"transactions"`      // not recorded: 0
	PartitionsCreated int     `json:"partitionsCreated"` // not recorded: 0
	PartitionsDeleted int     `json:"partitionsDeleted"` // not recorded: 0
	PartitionCount    int64   `json:"partitionCount"`
	AvgLagMs          float64 `json:"avgLagMs"`
	MaxLagMs          int64   `json:"maxLagMs"`
	PushPerSecond     float64 `json:"pushPerSecond"`
	PopPerSecond      float64 `json:"popPerSecond"`
	AckPerSecond      float64 `json:"ackPerSecond"` // acks of either outcome
	EmptyPerSecond    float64 `json:"emptyPerSecond"`
	ParkedCount       int     `json:"parkedCount"` // not recorded: 0
	Pending           int64   `json:"pending"`
	DLQ               int64   `json:"dlq"`
}

func newQueueOpsPoint(b store.QueueBucket, bm int) queueOpsPoint {
	return queueOpsPoint{Bucket: msStamp(b.Bucket), QueueName: b.Queue,
		PushRequests: b.PushRequests, PushMessages: b.PushMessages, PopMessages: b.PopMessages, PopEmpty: b.PopEmpty,
		AckRequests: b.AckRequests, AckSuccess: completed(b), AckFailed: b.AckFailed, AutoAcked: b.AutoAcked,
		PartitionCount: max(b.Partitions, 0), AvgLagMs: avgLag(b.LagSumMs, b.LagCount), MaxLagMs: b.LagMaxMs,
		PushPerSecond: perSecond(b.PushMessages, bm), PopPerSecond: perSecond(b.PopMessages, bm),
		AckPerSecond: perSecond(completed(b)+b.AckFailed, bm), EmptyPerSecond: perSecond(b.PopEmpty, bm),
		Pending: max(b.Pending, 0), DLQ: b.DLQ}
}

// queueParkedAnswer is the queue-parked-replicas answer. Parked long polls
// are not recorded, so both arrays are always empty.
type queueParkedAnswer struct {
	analyticsEnvelope
	Series   []queueParkedPoint   `json:"series"`
	Replicas []queueParkedReplica `json:"replicas"`
}

// queueParkedPoint is the shape Queen gives a bucket of parked polls.
type queueParkedPoint struct {
	Bucket      string `json:"bucket"`
	QueueName   string `json:"queueName"`
	Hostname    string `json:"hostname"`
	WorkerID    string `json:"workerId"`
	ParkedCount int64  `json:"parkedCount"`
}

// queueParkedReplica is the shape Queen gives a broker with parked polls.
type queueParkedReplica struct {
	Hostname string `json:"hostname"`
	WorkerID string `json:"workerId"`
}

// retentionAnswer is the retention answer.
type retentionAnswer struct {
	analyticsEnvelope
	Series []retentionPoint `json:"series"`
	Totals retentionCounts  `json:"totals"` // the series summed
}

// retentionCounts is what the retention pass deleted over a bucket or the
// window.
type retentionCounts struct {
	RetentionMsgs          int64 `json:"retentionMsgs"`
	CompletedRetentionMsgs int64 `json:"completedRetentionMsgs"`
	EvictionMsgs           int64 `json:"evictionMsgs"`
	TotalMsgs              int64 `json:"totalMsgs"`
	EventCount             int64 `json:"eventCount"` // history rows: one per queue per round
}

// retentionPoint is one bucket of the retention series.
type retentionPoint struct {
	Bucket string `json:"bucket"`
	retentionCounts
}

// add sums b's counts into c.
func (c *retentionCounts) add(b retentionCounts) {
	c.RetentionMsgs += b.RetentionMsgs
	c.CompletedRetentionMsgs += b.CompletedRetentionMsgs
	c.EvictionMsgs += b.EvictionMsgs
	c.TotalMsgs += b.TotalMsgs
	c.EventCount += b.EventCount
}

// systemMetricsAnswer is the system-metrics answer.
type systemMetricsAnswer struct {
	analyticsEnvelope
	Replicas     []systemReplica `json:"replicas"`
	ReplicaCount int             `json:"replicaCount"`
	PointCount   int             `json:"pointCount"` // points over all replicas
}

// systemReplica is one broker's gauges over the window.
type systemReplica struct {
	Hostname   string        `json:"hostname"`
	Port       int           `json:"port"`
	WorkerID   string        `json:"workerId"`
	TimeSeries []systemPoint `json:"timeSeries"`
}

// systemPoint is one broker's gauges over one bucket. Metrics is keyed by
// gauge group then gauge name, as recorded; the groups Queen always shows
// are there, empty when not recorded.
type systemPoint struct {
	Timestamp   string   `json:"timestamp"`
	SampleCount int      `json:"sampleCount"`
	Metrics     gaugeSet `json:"metrics"`
	// Latency is the broker's request latency over the bucket (a field
	// Queen's answer has not).
	Latency latencySummary `json:"latency"`
}

func newSystemPoint(k brokerBucket) systemPoint {
	metrics := gaugeSet{"threadpool": {}, "registries": {}, "shared_state": {}}
	for group, names := range k.gauges {
		metrics[group] = names
	}
	return systemPoint{Timestamp: msStamp(k.at), SampleCount: k.samples, Metrics: metrics, Latency: k.latency.summary()}
}

// workerMetricsAnswer is the worker-metrics answer.
type workerMetricsAnswer struct {
	analyticsEnvelope
	PointCount int            `json:"pointCount"`
	TimeSeries []workerPoint  `json:"timeSeries"`
	Workers    []workerTotals `json:"workers"`
	Queues     []queueLagRow  `json:"queues"`
	Summary    workerSummary  `json:"summary"`
}

// workerPoint is one bucket of the tenant's queues (summed) with the
// brokers' own figures of that bucket.
type workerPoint struct {
	Timestamp         string  `json:"timestamp"`
	PushMessages      int64   `json:"pushMessages"`
	PopMessages       int64   `json:"popMessages"`
	AckMessages       int64   `json:"ackMessages"` // acks of either outcome
	PushRequests      int64   `json:"pushRequests"`
	PopRequests       int64   `json:"popRequests"`
	AckRequests       int64   `json:"ackRequests"`
	JobsDone          int64   `json:"jobsDone"` // completed
	PushPerSecond     float64 `json:"pushPerSecond"`
	PopPerSecond      float64 `json:"popPerSecond"`
	AckPerSecond      float64 `json:"ackPerSecond"`
	AvgEventLoopLagMs int     `json:"avgEventLoopLagMs"` // no Go equivalent: 0, named in notApplicable
	MaxEventLoopLagMs int     `json:"maxEventLoopLagMs"` // likewise
	AvgFreeSlots      int     `json:"avgFreeSlots"`      // idle pool connections (workGauges), summed over brokers
	MinFreeSlots      int     `json:"minFreeSlots"`
	DBConnections     float64 `json:"dbConnections"`   // busy pool connections, summed over brokers
	AvgJobQueueSize   int     `json:"avgJobQueueSize"` // database work waiting for an admission slot
	MaxJobQueueSize   int     `json:"maxJobQueueSize"`
	BackoffSize       int     `json:"backoffSize"` // parked long-poll pops
	AvgLagMs          float64 `json:"avgLagMs"`
	MaxLagMs          int64   `json:"maxLagMs"`
	LagCount          int64   `json:"lagCount"`
	DBErrors          int64   `json:"dbErrors"`
	AckSuccess        int64   `json:"ackSuccess"`
	AckFailed         int64   `json:"ackFailed"`
	DLQCount          int64   `json:"dlqCount"`
	AvgLatencyMs      float64 `json:"avgLatencyMs"`
	P99LatencyMs      float64 `json:"p99LatencyMs"` // the brokers' greatest
	Requests          int64   `json:"requests"`
}

func newWorkerPoint(p clusterBucket, bm int) workerPoint {
	done, acked := completed(p.q), completed(p.q)+p.q.AckFailed
	return workerPoint{Timestamp: msStamp(p.at), PushMessages: p.q.PushMessages, PopMessages: p.q.PopMessages,
		AckMessages: acked, PushRequests: p.q.PushRequests, PopRequests: p.q.PopRequests,
		AckRequests: p.q.AckRequests, JobsDone: done,
		PushPerSecond: perSecond(p.q.PushMessages, bm), PopPerSecond: perSecond(p.q.PopMessages, bm),
		AckPerSecond: perSecond(acked, bm), DBConnections: p.poolActive,
		AvgFreeSlots: round(p.work.freeSlotsAvg), MinFreeSlots: round(p.work.freeSlotsMin),
		AvgJobQueueSize: round(p.work.jobQueueAvg), MaxJobQueueSize: round(p.work.jobQueueMax), BackoffSize: round(p.work.parkedAvg),
		AvgLagMs: avgLag(p.q.LagSumMs, p.q.LagCount), MaxLagMs: p.q.LagMaxMs, LagCount: p.q.LagCount,
		DBErrors: p.dbErrors, AckSuccess: done, AckFailed: p.q.AckFailed, DLQCount: p.q.DLQ,
		AvgLatencyMs: p.avgLatency(), P99LatencyMs: p.p99Latency, Requests: p.requests}
}

// workerTotals is one broker's request counts over the window.
type workerTotals struct {
	Hostname     string `json:"hostname"`
	Port         int    `json:"port"`
	WorkerID     string `json:"workerId"`
	Requests     int64  `json:"requests"`
	PushRequests int64  `json:"pushRequests"`
	PopRequests  int64  `json:"popRequests"`
	AckRequests  int64  `json:"ackRequests"`
	LastSeen     string `json:"lastSeen"` // its newest recorded minute
	// Latency is its request latency over the window (a field Queen's
	// answer has not).
	Latency latencySummary `json:"latency"`
	workerGauges
}

// workerGauges are one broker's pool and queued work in its newest
// recorded minute, named as Queen's worker rows name them (workGauges);
// NotApplicable names the fields Go has no equivalent of, which stay 0.
type workerGauges struct {
	AvgFreeSlots      int      `json:"avgFreeSlots"`
	MinFreeSlots      int      `json:"minFreeSlots"`
	DBConnections     float64  `json:"dbConnections"`
	AvgJobQueueSize   int      `json:"avgJobQueueSize"`
	MaxJobQueueSize   int      `json:"maxJobQueueSize"`
	BackoffSize       int      `json:"backoffSize"`
	AvgEventLoopLagMs int      `json:"avgEventLoopLagMs"`
	MaxEventLoopLagMs int      `json:"maxEventLoopLagMs"`
	NotApplicable     []string `json:"notApplicable"`
}

// notApplicable are Queen's worker fields with no Go equivalent: a Go
// broker has no event loop to lag.
var notApplicable = []string{"avgEventLoopLagMs", "maxEventLoopLagMs"}

func newWorkerGauges(b *brokerSeries) workerGauges {
	return workerGauges{AvgFreeSlots: round(b.work.freeSlotsAvg), MinFreeSlots: round(b.work.freeSlotsMin),
		DBConnections: b.poolActive, AvgJobQueueSize: round(b.work.jobQueueAvg), MaxJobQueueSize: round(b.work.jobQueueMax),
		BackoffSize: round(b.work.parkedAvg), NotApplicable: notApplicable}
}

// round is a gauge's mean as the whole number Queen's integer fields hold.
func round(f float64) int { return int(math.Round(f)) }

// workerSummary is the window's totals, with the tenant's live pending
// count.
type workerSummary struct {
	TotalPushMessages int64 `json:"totalPushMessages"`
	TotalPopMessages  int64 `json:"totalPopMessages"`
	TotalAckMessages  int64 `json:"totalAckMessages"` // acks of either outcome
	TotalPushRequests int64 `json:"totalPushRequests"`
	TotalPopRequests  int64 `json:"totalPopRequests"`
	TotalAckRequests  int64 `json:"totalAckRequests"`
	PendingMessages   int64 `json:"pendingMessages"`
}
