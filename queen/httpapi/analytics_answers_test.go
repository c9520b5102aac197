package httpapi

import (
	"encoding/json"
	"testing"
)

// The typed analytics and trace answers carry every key the contract
// (contract-admin.md 4.7 and 5) names, spelled as it spells them: a
// renamed or dropped json tag fails here, before any client notices.
func TestAnalyticsAndTraceAnswersHaveTheContractKeys(t *testing.T) {
	for _, c := range []struct {
		name string
		v    any
		keys []string
	}{
		{"queue-ops", queueOpsAnswer{}, []string{"timeRange", "bucketMinutes", "series", "queues"}},
		{"queue-lag row", queueLagBucket{}, []string{"queueName", "popCount", "avgLagMs", "maxLagMs", "bucketTime"}},
		{"parked", queueParkedAnswer{}, []string{"timeRange", "bucketMinutes", "series", "replicas"}},
		{"parked point", queueParkedPoint{}, []string{"bucket", "queueName", "hostname", "workerId", "parkedCount"}},
		{"retention", retentionAnswer{}, []string{"timeRange", "bucketMinutes", "series", "totals"}},
		{"retention point", retentionPoint{}, []string{"bucket", "retentionMsgs", "completedRetentionMsgs", "evictionMsgs", "totalMsgs", "eventCount"}},
		{"system-metrics", systemMetricsAnswer{}, []string{"timeRange", "replicas", "replicaCount", "bucketMinutes", "pointCount"}},
		{"system replica", systemReplica{}, []string{"hostname", "port", "workerId", "timeSeries"}},
		{"system point", systemPoint{}, []string{"timestamp", "sampleCount", "metrics"}},
		{"worker-metrics", workerMetricsAnswer{}, []string{"timeRange", "bucketMinutes", "pointCount", "timeSeries", "workers", "queues", "summary"}},
		{"worker point", workerPoint{}, []string{"timestamp", "pushMessages", "popMessages", "ackMessages", "pushRequests", "popRequests",
			"ackRequests", "jobsDone", "pushPerSecond", "popPerSecond", "ackPerSecond", "avgEventLoopLagMs", "maxEventLoopLagMs",
			"avgFreeSlots", "minFreeSlots", "dbConnections", "avgJobQueueSize", "maxJobQueueSize", "backoffSize", "avgLagMs",
			"maxLagMs", "lagCount", "dbErrors", "ackSuccess", "ackFailed", "dlqCount"}},
		{"worker-metrics queue", queueLagRow{}, []string{"queueName", "popCount", "avgLagMs", "maxLagMs"}},
		{"trace", traceWire{}, []string{"id", "event_type", "data", "consumer_group", "worker_id", "created_at", "trace_names"}},
		{"trace recorded", traceRecorded{}, []string{"success", "traceId"}},
		{"trace by name", traceOfNameWire{}, []string{"id", "transaction_id", "partition_id", "event_type", "data", "consumer_group",
			"worker_id", "created_at", "queue_name", "partition_name", "message_payload", "trace_names"}},
		{"traces by name", tracesByNameAnswer{}, []string{"traces", "total", "pagination"}},
		{"trace names", traceNamesAnswer{}, []string{"trace_names", "total", "pagination"}},
		{"trace name", traceNameWire{}, []string{"trace_name", "trace_count", "message_count", "last_seen"}},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		for _, k := range c.keys {
			if _, ok := got[k]; !ok {
				t.Errorf("%s: no %q in %s", c.name, k, b)
			}
		}
	}
}
