package httpapi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/store"
)

// Queen's own dashboard, pointed at this broker, read four answers wrong
// (issue 33): worker-metrics' timeSeries ran oldest first (its page
// reverses them, so the charts ran backwards), resources/overview
// answered no throughput though the minutes were recorded, overview and
// status counted pending and completed two ways, and the worker rows had
// no pool or queued-work figures. Each is checked here on the answer.
func TestQueenDashboardReadsTheseAnswersRight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Five messages consumed by a group only: queue mode never pops.
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "dash", "options": map[string]any{"retryLimit": 0, "dlqAfterMaxRetries": true}}), 200)
	for i := range 5 {
		e.push(item{"queue": "dash", "transactionId": string(rune('a' + i))})
	}
	p := e.pop("/api/v1/pop/queue/dash?batch=3&consumerGroup=g")
	if p == nil || len(p.Messages) != 3 {
		t.Fatalf("pop: %+v", p)
	}
	var acks []map[string]any
	for i, m := range p.Messages {
		status := map[bool]string{true: "failed", false: "completed"}[i == 2]
		acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": p.Messages[0].LeaseID, "status": status})
	}
	e.expect(e.do("POST", "/api/v1/ack/batch", map[string]any{"consumerGroup": "g", "acknowledgments": acks}), 200)

	now := time.Now().UTC().Truncate(time.Minute)
	gauges := func(idle, waiting, parked float64) json.RawMessage {
		b, _ := json.Marshal(map[string]map[string]map[string]float64{
			"database": {"pool_idle": {"avg": idle, "min": idle - 1, "max": idle, "last": idle}, "pool_active": {"avg": 2}},
			"work":     {"db_waiting": {"avg": waiting, "min": 0, "max": waiting + 2, "last": waiting}, "parked_pops": {"avg": parked}},
		})
		return b
	}
	minute := func(m time.Time, pushed, acked int64, idle, waiting, parked float64) {
		qs := []store.QueueMinute{{Minute: m, Tenant: config.DefaultTenant, Queue: "dash", PushMessages: pushed, AckSuccess: acked}}
		bs := []store.BrokerMinute{{Minute: m, Broker: "b1", Hostname: "h1", Port: 6632, Requests: 1, Samples: 6, Gauges: gauges(idle, waiting, parked)}}
		if err := e.store.RecordMinutes(context.Background(), "b1", qs, bs); err != nil {
			t.Fatal(err)
		}
	}
	minute(now.Add(-3*time.Minute), 60, 0, 9, 1, 1)
	minute(now.Add(-2*time.Minute), 120, 30, 7, 3, 2)
	window := "?from=" + now.Add(-10*time.Minute).Format(time.RFC3339) + "&to=" + now.Add(2*time.Minute).Format(time.RFC3339)

	var wm struct {
		TimeSeries []struct {
			Timestamp       string
			AvgFreeSlots    int
			AvgJobQueueSize int
		}
		Workers []workerFields
	}
	e.expect(e.do("GET", "/api/v1/analytics/worker-metrics"+window, nil), 200).json(t, &wm)
	if len(wm.TimeSeries) != 2 || wm.TimeSeries[0].Timestamp <= wm.TimeSeries[1].Timestamp {
		t.Errorf("worker-metrics timeSeries not newest first: %+v", wm.TimeSeries)
	}
	if len(wm.TimeSeries) == 2 && (wm.TimeSeries[0].AvgFreeSlots != 7 || wm.TimeSeries[0].AvgJobQueueSize != 3) {
		t.Errorf("worker-metrics newest point's gauges: %+v", wm.TimeSeries[0])
	}
	var st struct {
		Messages struct{ Pending, Completed, DeadLetter int64 }
		Workers  []workerFields
	}
	if _, err := e.store.RefreshQueueStats(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.expect(e.do("GET", "/api/v1/status"+window, nil), 200).json(t, &st)
	for name, ws := range map[string][]workerFields{"worker-metrics": wm.Workers, "status": st.Workers} {
		want := workerFields{AvgFreeSlots: 7, MinFreeSlots: 6, DBConnections: 2, AvgJobQueueSize: 3, MaxJobQueueSize: 5, BackoffSize: 2,
			NotApplicable: []string{"avgEventLoopLagMs", "maxEventLoopLagMs"}}
		if len(ws) != 1 || !ws[0].equal(want) {
			t.Errorf("%s workers: %+v, want the newest minute's %+v", name, ws, want)
		}
	}

	var ov struct {
		Messages   struct{ Pending, Completed, DeadLetter int64 }
		Throughput struct{ IngestedPerSecond, ProcessedPerSecond float64 }
	}
	e.expect(e.do("GET", "/api/v1/resources/overview", nil), 200).json(t, &ov)
	if ov.Throughput.IngestedPerSecond != 180.0/300 || ov.Throughput.ProcessedPerSecond != 30.0/300 {
		t.Errorf("overview throughput %+v, want the last five minutes' 0.6 and 0.1 msg/s", ov.Throughput)
	}
	// Group g took 3 of 5 and dead-lettered 1: 2 pending, 2 completed.
	if ov.Messages.Pending != 2 || ov.Messages.Completed != 2 || ov.Messages != st.Messages {
		t.Errorf("overview counts %+v and status counts %+v; want both pending 2, completed 2, deadLetter 1", ov.Messages, st.Messages)
	}
}

// workerFields are the pool and queued-work figures of a worker row.
type workerFields struct {
	AvgFreeSlots, MinFreeSlots         int
	DBConnections                      float64
	AvgJobQueueSize, MaxJobQueueSize   int
	BackoffSize                        int
	AvgEventLoopLagMs, MaxEventLoopLag int
	NotApplicable                      []string
}

func (w workerFields) equal(o workerFields) bool {
	a, _ := json.Marshal(w)
	b, _ := json.Marshal(o)
	return string(a) == string(b)
}
