package analytics

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/store"
)

// Leaf is one gauge as system-metrics answers it.
type Leaf struct {
	Avg  float64 `json:"avg"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	Last float64 `json:"last"`
}

func encodeGauges(gs map[string]map[string]*Gauge) json.RawMessage {
	out := make(map[string]map[string]Leaf, len(gs))
	for group, names := range gs {
		out[group] = make(map[string]Leaf, len(names))
		for name, g := range names {
			out[group][name] = Leaf{Avg: g.Avg, Min: g.Min, Max: g.Max, Last: g.Last}
		}
	}
	b, _ := json.Marshal(out) // maps of floats: cannot fail
	return b
}

// Sampler reads the broker's gauges for one sample: the CPU time used so
// far (microseconds, user and system) and the gauges by group and name.
type Sampler func() (cpuUserUs, cpuSysUs int64, gauges map[string]map[string]float64)

// Recording writes minutes; *store.Store is one.
type Recording interface {
	RecordMinutes(ctx context.Context, broker string, qs []store.QueueMinute, bs []store.BrokerMinute) error
}

// MaxPendingMinutes bounds what a flusher keeps while PostgreSQL refuses
// its writes: an hour of minutes, then the oldest are dropped.
const MaxPendingMinutes = 60

// Flusher samples the broker's gauges every SampleEvery and writes each
// closed minute once (a background.Service).
type Flusher struct {
	Recorder         *Recorder
	Store            Recording
	Broker, Hostname string
	Port             int
	Sample           Sampler // nil: no gauges
	Clock            clock.Clock
	Log              *slog.Logger
	SampleEvery      time.Duration // 0: 10 s

	next             time.Time
	lastUser, lastSy int64
	lastAt           time.Time
	sampled          bool
	pendingQ         []store.QueueMinute
	pendingB         []store.BrokerMinute
}

// Name implements background.Service.
func (f *Flusher) Name() string { return "analytics" }

// NextDue implements background.Service: the next sample, or the flush of
// the minute just closed if that comes first.
func (f *Flusher) NextDue(now time.Time) time.Time {
	if f.next.IsZero() {
		return now
	}
	return f.next
}

func (f *Flusher) every() time.Duration {
	if f.SampleEvery <= 0 {
		return 10 * time.Second
	}
	return f.SampleEvery
}

// RunOnce takes a sample, then writes the closed minutes.
func (f *Flusher) RunOnce(ctx context.Context) error {
	now := f.Clock.Now()
	f.next = now.Add(f.every())
	if boundary := now.Truncate(time.Minute).Add(time.Minute); boundary.Before(f.next) {
		f.next = boundary.Add(time.Second) // just after the minute closes
	}
	f.sample(now)
	return f.flush(ctx, now)
}

// Close writes every minute recorded, the open one too (a shutdown).
func (f *Flusher) Close(ctx context.Context) error {
	now := f.Clock.Now()
	f.sample(now)
	return f.flush(ctx, now.Add(time.Minute))
}

func (f *Flusher) sample(now time.Time) {
	if f.Sample == nil {
		return
	}
	user, sys, gauges := f.Sample()
	var du, ds int64
	var elapsed time.Duration
	if f.sampled {
		du, ds, elapsed = max(user-f.lastUser, 0), max(sys-f.lastSy, 0), now.Sub(f.lastAt)
	}
	f.lastUser, f.lastSy, f.lastAt, f.sampled = user, sys, now, true
	if gauges == nil {
		gauges = map[string]map[string]float64{}
	}
	gauges["cpu"] = map[string]float64{"user_us": cpuLeaf(du, elapsed), "system_us": cpuLeaf(ds, elapsed)}
	f.Recorder.Sample(now, du, ds, gauges)
}

// cpuLeaf is CPU time used over elapsed as Queen's system-metrics leaves
// cpu.user_us and cpu.system_us carry it despite their names: percent of
// one core times 100 (1 % is 100), which its System page divides by 100.
// The first sample, with nothing to compare, is 0.
func cpuLeaf(used int64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(used) / float64(elapsed.Microseconds()) * 100 * 100
}

// flush writes the minutes before until's, with any still pending.
func (f *Flusher) flush(ctx context.Context, until time.Time) error {
	qs, bs := f.Recorder.Take(until)
	for i := range bs {
		bs[i].Broker, bs[i].Hostname, bs[i].Port = f.Broker, f.Hostname, f.Port
	}
	f.pendingQ, f.pendingB = append(f.pendingQ, qs...), append(f.pendingB, bs...)
	f.trim()
	if len(f.pendingQ) == 0 && len(f.pendingB) == 0 {
		return nil
	}
	if err := f.Store.RecordMinutes(ctx, f.Broker, f.pendingQ, f.pendingB); err != nil {
		return err // kept: the next pass writes them again
	}
	f.pendingQ, f.pendingB = nil, nil
	return nil
}

// trim drops the oldest pending minutes past MaxPendingMinutes.
func (f *Flusher) trim() {
	if len(f.pendingB) == 0 && len(f.pendingQ) == 0 {
		return
	}
	newest := time.Time{}
	for _, b := range f.pendingB {
		newest = later(newest, b.Minute)
	}
	for _, q := range f.pendingQ {
		newest = later(newest, q.Minute)
	}
	floor := newest.Add(-MaxPendingMinutes * time.Minute)
	keepB := f.pendingB[:0]
	for _, b := range f.pendingB {
		if b.Minute.After(floor) {
			keepB = append(keepB, b)
		} else {
			f.Recorder.droppedMinutes.Add(1)
		}
	}
	keepQ := f.pendingQ[:0]
	for _, q := range f.pendingQ {
		if q.Minute.After(floor) {
			keepQ = append(keepQ, q)
		}
	}
	if dropped := len(f.pendingB) - len(keepB); dropped > 0 && f.Log != nil {
		f.Log.Warn("analytics minutes dropped: PostgreSQL refused their writes for an hour", "minutes", dropped)
	}
	f.pendingB, f.pendingQ = keepB, keepQ
}

// DroppedMinutes is how many broker minutes were dropped unwritten.
func (f *Flusher) DroppedMinutes() int64 { return f.Recorder.DroppedMinutes() }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
