package httpapi_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// The status and resource answers carry every key contract-admin.md
// section 4 names (a json tag typo or a dropped field fails here), and
// their lists are lists, never null, even on an empty broker.
func TestStatusAnswersCarryTheContractKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lists := map[string][]string{"/api/v1/status": {"throughput", "queues", "workers", "deadLetterQueue.topErrors"},
		"/api/v1/status/queues": {"queues"}, "/api/v1/status/analytics": {"dataPoints"},
		"/api/v1/resources/namespaces": {"namespaces"}, "/api/v1/resources/tasks": {"tasks"}}
	for path, keys := range lists {
		body := e.expect(e.do("GET", path, nil), 200).obj(t)
		for _, k := range keys {
			if _, ok := contractKey(t, body, k).([]any); !ok {
				t.Fatalf("%s on an empty broker: %s is not a list: %v", path, k, body)
			}
		}
	}
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "ck", "namespace": "billing", "task": "invoice"}), 200)
	e.push(item{"queue": "ck", "partition": "p1", "transactionId": "a"}, item{"queue": "ck", "partition": "p1", "transactionId": "b"})
	p := e.pop("/api/v1/pop/queue/ck")
	e.ack(p.Messages[0].TransactionID, p.PartitionID, p.LeaseID, "completed")
	if _, err := e.store.RefreshQueueStats(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.flushAnalytics()
	six := "total pending processing completed failed deadLetter"
	for path, keys := range map[string]string{
		"/api/v1/status": "timeRange.from timeRange.to bucketMinutes pointCount statsAge " +
			"throughput.0.{timestamp ingested processed popMessages ingestedPerSecond processedPerSecond popPerSecond " +
			"avgLagMs maxLagMs avgEventLoopLagMs maxEventLoopLagMs minFreeSlots dbErrors ackFailed dlqCount " +
			"queenCpuUserPct queenCpuSysPct queenRssMb dbPoolActive dbPoolIdle dbPoolSize} " +
			"queues.0.{id name namespace task partitions totalConsumed} messages.{" + six + "} " +
			"messages.requests.{push pop ack} messages.batchEfficiency.{push pop ack} " +
			"leases.{active partitionsWithLeases totalBatchSize totalAcked} " +
			"deadLetterQueue.{totalMessages affectedPartitions topErrors} workers errors.{dbErrors ackFailed dlqMessages}",
		"/api/v1/status/queues": "queues.0.{id name namespace task createdAt partitions} queues.0.messages.{total pending processing} " +
			"pagination.{limit offset}",
		"/api/v1/status/queues/ck": "queue.{id name namespace task priority createdAt} " +
			"queue.config.{leaseTime retryLimit retryDelay ttl maxQueueSize deadLetterQueue} " +
			"partitions.0.{id name createdAt lastActivity oldestMessage newestMessage} partitions.0.messages.{" + six + "} " +
			"partitions.0.stats.{" + six + "} partitions.0.cursor.{totalConsumed batchesConsumed} " +
			"totals.{" + six + "} totals.messages.{" + six + "}",
		"/api/v1/status/analytics":     "dataPoints.0.{timestamp messages} interval from to",
		"/api/v1/resources/namespaces": "namespaces.0.{namespace queues partitions name queueCount taskCount} namespaces.0.messages.{total pending}",
		"/api/v1/resources/tasks":      "tasks.0.{task queues partitions name queueCount namespaceCount} tasks.0.messages.{total pending}",
	} {
		body := e.expect(e.do("GET", path, nil), 200).obj(t)
		for _, k := range contractKeyPaths(keys) {
			contractKey(t, body, k)
		}
	}
}

// contractKeyPaths turns "a.{b c} d" into a.b, a.c and d.
func contractKeyPaths(spec string) []string {
	var out []string
	for len(spec) > 0 {
		spec = strings.TrimSpace(spec)
		i := strings.IndexAny(spec, " {")
		switch {
		case i < 0:
			return append(out, spec)
		case spec[i] == ' ':
			out, spec = append(out, spec[:i]), spec[i:]
		default:
			end := strings.IndexByte(spec, '}')
			for _, f := range strings.Fields(spec[i+1 : end]) {
				out = append(out, spec[:i]+f)
			}
			spec = spec[end+1:]
		}
	}
	return out
}

// contractKey follows a dotted path (a number indexes a list) and fails
// when a key is missing; a key present as null is there.
func contractKey(t *testing.T, v any, path string) any {
	t.Helper()
	for _, k := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[k]; !ok {
				t.Fatalf("%s: no %q in %v", path, k, c)
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(c) {
				t.Fatalf("%s: no element %q in %v", path, k, c)
			}
			v = c[i]
		default:
			t.Fatalf("%s: %q under %v", path, k, v)
		}
	}
	return v
}
