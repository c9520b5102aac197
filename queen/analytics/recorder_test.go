package analytics

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/store"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// A minute is taken once it has closed, whole, and never again; the open
// minute stays until a shutdown takes it.
func TestTakeReturnsClosedMinutesOnce(t *testing.T) {
	r := NewRecorder(0)
	r.Pushed(t0.Add(10*time.Second), "t", "a", 3)
	r.Pushed(t0.Add(50*time.Second), "t", "a", 2)
	r.Popped(t0.Add(70*time.Second), "t", "a", 4, 400, 150)
	r.Request(t0.Add(5*time.Second), RoutePush, 3*time.Millisecond, 201)
	qs, bs := r.Take(t0.Add(65 * time.Second))
	if len(qs) != 1 || qs[0].PushRequests != 2 || qs[0].PushMessages != 5 || !qs[0].Minute.Equal(t0) || len(bs) != 1 || bs[0].Requests != 1 {
		t.Fatalf("first minute: %+v %+v", qs, bs)
	}
	if qs, bs := r.Take(t0.Add(65 * time.Second)); len(qs)+len(bs) != 0 {
		t.Fatalf("taken twice: %+v %+v", qs, bs)
	}
	qs, _ = r.Take(t0.Add(10 * time.Minute))
	if len(qs) != 1 || qs[0].PopMessages != 4 || qs[0].LagSumMs != 400 || qs[0].LagMaxMs != 150 || qs[0].LagCount != 4 {
		t.Fatalf("second minute: %+v", qs)
	}
}

// The latency percentiles are the bounds of the buckets the ranks fall
// in, never above the minute's maximum.
func TestLatencyPercentiles(t *testing.T) {
	r := NewRecorder(0)
	for i := 0; i < 98; i++ {
		r.Request(t0, RouteOther, 800*time.Microsecond, 200)
	}
	r.Request(t0, RouteOther, 40*time.Millisecond, 200)
	r.Request(t0, RouteOther, 70*time.Millisecond, 503)
	_, bs := r.Take(t0.Add(time.Minute))
	b := bs[0]
	if b.LatencyP50Ms != 1 || b.LatencyP99Ms != 50 || b.LatencyMaxMs != 70 || b.ServerErrors != 1 || b.LatencyCount != 100 {
		t.Fatalf("p50 %v p99 %v max %v errors %d", b.LatencyP50Ms, b.LatencyP99Ms, b.LatencyMaxMs, b.ServerErrors)
	}
}

// Past maxQueues queues in a minute, a new queue's row is refused and
// counted; the next minute starts over.
func TestQueueRowsAreBoundedPerMinute(t *testing.T) {
	r := NewRecorder(2)
	for _, q := range []string{"a", "b", "c", "a"} {
		r.Pushed(t0, "t", q, 1)
	}
	r.Pushed(t0.Add(time.Minute), "t", "c", 1)
	qs, _ := r.Take(t0.Add(2 * time.Minute))
	if len(qs) != 3 || r.Dropped() != 1 || qs[0].Queue != "a" || qs[0].PushMessages != 2 || qs[2].Queue != "c" {
		t.Fatalf("rows %+v, dropped %d", qs, r.Dropped())
	}
}

// fakeRecording fails while down and keeps what it was given.
type fakeRecording struct {
	down  bool
	calls int
	qs    []store.QueueMinute
	bs    []store.BrokerMinute
}

func (f *fakeRecording) RecordMinutes(_ context.Context, _ string, qs []store.QueueMinute, bs []store.BrokerMinute) error {
	f.calls++
	if f.down {
		return errors.New("down")
	}
	f.qs, f.bs = append(f.qs, qs...), append(f.bs, bs...)
	return nil
}

// A minute the database refused is written with the next one; after an
// hour of refusals the oldest minutes are dropped and counted.
func TestFlusherKeepsMinutesUntilWritten(t *testing.T) {
	c := clock.NewSim(t0)
	r := NewRecorder(0)
	rec := &fakeRecording{down: true}
	f := &Flusher{Recorder: r, Store: rec, Broker: "b1", Hostname: "h", Port: 1, Clock: c,
		Sample: func() (int64, int64, map[string]map[string]float64) {
			return int64(c.Now().Sub(t0) / time.Microsecond / 10), 0, map[string]map[string]float64{"memory": {"rss_bytes": 100}}
		}}
	r.Pushed(c.Now(), "t", "a", 1)
	_ = f.RunOnce(context.Background())
	c.Advance(time.Minute)
	if err := f.RunOnce(context.Background()); err == nil {
		t.Fatal("a refused write reported no error")
	}
	rec.down = false
	c.Advance(time.Minute)
	if err := f.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rec.qs) != 1 || rec.qs[0].PushMessages != 1 || len(rec.bs) != 2 || rec.bs[0].Broker != "b1" {
		t.Fatalf("written %+v %+v", rec.qs, rec.bs)
	}
	var g map[string]map[string]Leaf
	if err := json.Unmarshal(rec.bs[1].Gauges, &g); err != nil || g["memory"]["rss_bytes"].Avg != 100 || g["cpu"]["user_us"].Last <= 0 {
		t.Fatalf("gauges %s: %v", rec.bs[1].Gauges, err)
	}
	rec.down = true
	for i := 0; i < MaxPendingMinutes+5; i++ {
		r.Pushed(c.Now(), "t", "a", 1)
		c.Advance(time.Minute)
		_ = f.RunOnce(context.Background())
	}
	if f.DroppedMinutes() == 0 || len(f.pendingB) > MaxPendingMinutes+1 {
		t.Fatalf("after an outage of %d minutes: %d pending, %d dropped", MaxPendingMinutes+5, len(f.pendingB), f.DroppedMinutes())
	}
}

// Queen's System page reads cpu.user_us and cpu.system_us as percent of a
// core times 100, whatever their names say: a broker using 1 % of a core
// in user time and 2 % in system time records 100 and 200, not the
// microseconds it used between samples (which read as 400-800 %).
func TestFlusherCPULeavesArePercentTimes100(t *testing.T) {
	c := clock.NewSim(t0)
	rec := &fakeRecording{}
	f := &Flusher{Recorder: NewRecorder(0), Store: rec, Broker: "b1", Clock: c, SampleEvery: 10 * time.Second,
		Sample: func() (int64, int64, map[string]map[string]float64) {
			used := int64(c.Now().Sub(t0) / time.Microsecond)
			return used / 100, used / 50, nil
		}}
	for i := 0; i < 8; i++ {
		if err := f.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.Advance(10 * time.Second)
	}
	if len(rec.bs) == 0 {
		t.Fatal("no minute written")
	}
	var g map[string]map[string]Leaf
	if err := json.Unmarshal(rec.bs[0].Gauges, &g); err != nil {
		t.Fatal(err)
	}
	user, sys := g["cpu"]["user_us"], g["cpu"]["system_us"]
	if math.Abs(user.Last-100) > 0.5 || math.Abs(sys.Last-200) > 0.5 || user.Max > 100.5 {
		t.Fatalf("cpu leaves user %+v system %+v; want 100 and 200 (1 %% and 2 %% of a core, times 100)", user, sys)
	}
}
