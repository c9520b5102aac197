package spool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

const t1 = "11111111-1111-4111-8111-111111111111"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func open(t *testing.T, dir string, fs spool.FS, c clock.Clock) *spool.Spool {
	t.Helper()
	if fs == nil {
		fs = spool.OSFS{}
	}
	s, err := spool.Open(spool.Options{Dir: dir, FS: fs, Clock: c, EventsPerFile: 3, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ev(tenant, txid string) spool.Event {
	return spool.Event{Tenant: tenant, Queue: "q", Partition: "p", TransactionID: txid, Payload: json.RawMessage(`{"n":1}`)}
}

func TestFileFormatRotationAndTornTail(t *testing.T) {
	dir := t.TempDir()
	c := clock.NewSim(time.Unix(1000, 0))
	s := open(t, dir, nil, c)
	if err := s.Append([]spool.Event{ev(spool.DefaultTenant, "a"), ev(t1, "b")}); err != nil {
		t.Fatal(err)
	}
	tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	if len(tmp) != 1 {
		t.Fatalf("want one active .tmp file, got %v", tmp)
	}
	raw, _ := os.ReadFile(tmp[0])
	if strings.Contains(string(raw), spool.DefaultTenant) || !strings.Contains(string(raw), `"tenant":"`+t1+`"`) {
		t.Fatalf("the default tenant must be omitted and others kept: %q", raw)
	}
	// The third event reaches FILE_BUFFER_EVENTS_PER_FILE (3): finalized.
	if err := s.Append([]spool.Event{ev(t1, "c")}); err != nil {
		t.Fatal(err)
	}
	if bufs, _ := s.Buffers(); len(bufs) != 1 || s.Pending() != 3 {
		t.Fatalf("rotation: %v pending %d", bufs, s.Pending())
	}
	// A crash leaves a .tmp whose last record is torn: reopening finalizes
	// it and the intact records still count.
	if err := s.Append([]spool.Event{ev(t1, "d")}); err != nil {
		t.Fatal(err)
	}
	tmp, _ = filepath.Glob(filepath.Join(dir, "*.tmp"))
	f, _ := os.OpenFile(tmp[0], os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{0, 0, 0, 50, 1, 2, 3}) // a header promising 50 bytes that never came
	f.Close()
	s2 := open(t, dir, nil, c)
	if bufs, _ := s2.Buffers(); len(bufs) != 2 || s2.Pending() != 4 {
		t.Fatalf("reopen: %v pending %d", bufs, s2.Pending())
	}
}

// env is a drainer over a real database.
type env struct {
	st    *store.Store
	sp    *spool.Spool
	d     *spool.Drainer
	clock *clock.Sim
	dir   string
}

func newEnv(t *testing.T, fs spool.FS) *env {
	t.Helper()
	c := clock.NewSim(time.Unix(1000, 0))
	e := &env{clock: c, dir: t.TempDir()}
	e.st = store.New(storetest.Pool(t), store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	e.sp = open(t, e.dir, fs, c)
	e.d = &spool.Drainer{Spool: e.sp, Every: 100 * time.Millisecond, MaxBatch: 2, Arbiter: admission.New(4, 0.05),
		Ping: e.st.Ping,
		Replay: func(ctx context.Context, tenant string, items []store.PushItem) error {
			_, err := e.st.Push(ctx, tenant, items, "")
			return err
		}}
	return e
}

func (e *env) count(t *testing.T, tenant string) int {
	t.Helper()
	qs, err := e.st.ListQueues(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, q := range qs {
		n += int(q.Messages)
	}
	return n
}

func TestDrainReplaysExactlyOnceUnderItsTenant(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	// "a" already committed before the outage: replay must not write it again.
	if _, err := e.st.Push(ctx, t1, []store.PushItem{{Queue: "q", Partition: "p", TransactionID: "a"}}, ""); err != nil {
		t.Fatal(err)
	}
	for _, txid := range []string{"a", "b", "c", "d", "e"} {
		if err := e.sp.Append([]spool.Event{ev(t1, txid)}); err != nil {
			t.Fatal(err)
		}
	}
	e.sp.Append([]spool.Event{ev(spool.DefaultTenant, "z")})
	if err := e.d.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, t1); n != 5 {
		t.Fatalf("tenant t1 holds %d messages, want 5 (a once, b-e)", n)
	}
	if n := e.count(t, spool.DefaultTenant); n != 1 {
		t.Fatalf("default tenant holds %d, want 1", n)
	}
	if bufs, _ := e.sp.Buffers(); len(bufs) != 0 || e.sp.Pending() != 0 {
		t.Fatalf("after drain: %v pending %d", bufs, e.sp.Pending())
	}
}

// poison is an event PostgreSQL refuses every time (a NUL byte in text).
func poison() spool.Event { return ev(t1, "bad\x00txid") }

func TestPoisonFileQuarantinedAfterFiveAndNewerFilesReplay(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.sp.Append([]spool.Event{poison()})
	e.sp.Finalize()
	e.clock.Advance(time.Millisecond)
	e.sp.Append([]spool.Event{ev(t1, "good")})
	for i := 1; i <= 4; i++ {
		e.d.RunOnce(ctx)
		if e.d.Quarantined.Load() != 0 {
			t.Fatalf("quarantined after %d failures", i)
		}
		if e.count(t, t1) != 0 {
			t.Fatal("a newer file replayed while the head is still being retried")
		}
	}
	e.d.RunOnce(ctx) // fifth permanent failure: quarantine, then go on
	if e.d.Quarantined.Load() != 1 || e.sp.Failed() != 1 {
		t.Fatalf("quarantined %d, failed dir %d", e.d.Quarantined.Load(), e.sp.Failed())
	}
	if e.count(t, t1) != 1 {
		t.Fatal("the file behind the poison one did not replay in the same cycle")
	}
	if !e.sp.Healthy() {
		t.Fatal("a permanent failure is not a database outage")
	}
}

// A poison record shares its file with other clients' records: only it is
// quarantined, with its SQLSTATE beside it; the others are stored once, at
// the first attempt, and not again by the retries.
func TestPoisonRecordIsQuarantinedAloneWithItsReason(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.d.MaxBatch = 10 // the poison record shares a batch with good ones
	e.sp.Append([]spool.Event{ev(t1, "a"), ev(spool.DefaultTenant, "b")})
	e.sp.Append([]spool.Event{poison(), ev(t1, "c")})
	e.sp.Append([]spool.Event{ev(t1, "d")})
	e.sp.Finalize()
	if err := e.d.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// EventsPerFile is 3: a b poison c share the head file, d is behind it
	// and waits until the head is quarantined.
	if n, m := e.count(t, t1), e.count(t, spool.DefaultTenant); n != 2 || m != 1 {
		t.Fatalf("after the first attempt: t1 holds %d (want 2: a c), default %d (want 1)", n, m)
	}
	if e.sp.Pending() != 2 {
		t.Fatalf("pending %d, want the poison record and d", e.sp.Pending())
	}
	for i := 2; i <= 5; i++ {
		e.d.RunOnce(ctx)
	}
	if e.d.Quarantined.Load() != 1 || e.sp.Failed() != 1 || e.sp.Pending() != 0 {
		t.Fatalf("quarantined %d, failed files %d, pending %d", e.d.Quarantined.Load(), e.sp.Failed(), e.sp.Pending())
	}
	if n := e.count(t, t1); n != 3 {
		t.Fatalf("t1 holds %d after the quarantine, want 3 (a c d)", n)
	}
	failed, _ := filepath.Glob(filepath.Join(e.sp.FailedDir(), "*"))
	var records, reasons []string
	for _, f := range failed {
		raw, _ := os.ReadFile(f)
		if strings.HasSuffix(f, ".reasons.jsonl") {
			reasons = strings.Split(strings.TrimSpace(string(raw)), "\n")
			continue
		}
		records = append(records, string(raw))
	}
	if len(records) != 1 || strings.Count(records[0], "transactionId") != 1 || !strings.Contains(records[0], `bad\u0000txid`) {
		t.Fatalf("the quarantined file must hold the poison record alone: %q", records)
	}
	var why spool.Rejected
	if len(reasons) != 1 || json.Unmarshal([]byte(reasons[0]), &why) != nil || why.SQLState == "" ||
		why.TransactionID != "bad\x00txid" || why.Tenant != t1 || why.Reason == "" {
		t.Fatalf("reasons: %q", reasons)
	}
}

// A file replays in bounded memory: batches are written as soon as the
// payload bytes gathered reach MaxBytes, and each partition's events still
// replay in file order.
func TestReplayHoldsBoundedBytes(t *testing.T) {
	e := newEnv(t, nil)
	e.d.MaxBatch, e.d.MaxBytes = 1000, 100
	held, most := 0, 0
	var order []string
	replay := e.d.Replay
	e.d.Replay = func(ctx context.Context, tenant string, items []store.PushItem) error {
		for _, it := range items {
			held += len(it.Payload.Raw())
			order = append(order, it.Partition+"/"+it.TransactionID)
		}
		most = max(most, held)
		held = 0
		return replay(ctx, tenant, items)
	}
	s := e.sp // one Append is one file, whatever EventsPerFile says
	var evs []spool.Event
	for i := 0; i < 60; i++ {
		evs = append(evs, spool.Event{Tenant: t1, Queue: "q", Partition: fmt.Sprint("p", i%4),
			TransactionID: fmt.Sprintf("m%02d", i), Payload: json.RawMessage(`"0123456789"`)})
	}
	if err := s.Append(evs); err != nil {
		t.Fatal(err)
	}
	s.Finalize()
	if err := e.d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, t1); n != 60 {
		t.Fatalf("stored %d of 60", n)
	}
	if most > 100+12 || most == 0 {
		t.Fatalf("one write held %d payload bytes, bound 100 (+ one event)", most)
	}
	last := map[string]string{}
	for _, o := range order {
		p, id, _ := strings.Cut(o, "/")
		if id <= last[p] {
			t.Fatalf("partition %s replayed %s after %s", p, id, last[p])
		}
		last[p] = id
	}
}

func TestUnreadableFileIsPermanentAndMoveFailureDeletes(t *testing.T) {
	ffs := faults.NewFaultyFS(spool.OSFS{})
	e := newEnv(t, ffs)
	e.sp.Append([]spool.Event{ev(t1, "x")})
	e.sp.Finalize()
	ffs.FailNext("open", faults.ErrIO, 5)
	ffs.FailNext("rename", faults.ErrIO, 1) // the quarantine move fails too
	for i := 0; i < 5; i++ {
		e.d.RunOnce(context.Background())
	}
	if e.d.Deleted.Load() != 1 {
		t.Fatalf("want the poison file deleted when it cannot be moved; deleted=%d quarantined=%d", e.d.Deleted.Load(), e.d.Quarantined.Load())
	}
	if bufs, _ := e.sp.Buffers(); len(bufs) != 0 {
		t.Fatalf("left %v", bufs)
	}
}

func TestTransientFailuresCoolDownAfterTen(t *testing.T) {
	e := newEnv(t, nil)
	calls := 0
	e.d.Replay = func(context.Context, string, []store.PushItem) error {
		calls++
		return &pgconn.PgError{Code: "08006"} // connection failure
	}
	e.sp.Append([]spool.Event{ev(t1, "x")})
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		e.d.RunOnce(ctx)
		e.clock.Advance(100 * time.Millisecond)
	}
	if e.d.Cooldowns.Load() != 1 || e.sp.Healthy() {
		t.Fatalf("cooldowns %d healthy %v", e.d.Cooldowns.Load(), e.sp.Healthy())
	}
	now := e.clock.Now()
	if due := e.d.NextDue(now); due.Sub(now) < 4*time.Second {
		t.Fatalf("parked only until %v", due.Sub(now))
	}
	before := calls
	e.d.RunOnce(ctx) // parked: no attempt
	e.clock.Advance(5 * time.Second)
	e.d.RunOnce(ctx)
	if calls != before+1 {
		t.Fatalf("calls during/after the cooldown: %d -> %d", before, calls)
	}
	if e.d.Quarantined.Load() != 0 {
		t.Fatal("transient failures must never quarantine")
	}
}

func TestPacingTenFilesHealthyOneFailing(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for i := 0; i < 25; i++ {
		e.sp.Append([]spool.Event{ev(t1, fmt.Sprint("m", i))})
		e.sp.Finalize()
		e.clock.Advance(time.Millisecond)
	}
	e.sp.SetHealthy(false)
	e.d.RunOnce(ctx)
	if bufs, _ := e.sp.Buffers(); len(bufs) != 24 {
		t.Fatalf("an unhealthy cycle replayed %d files, want 1", 25-len(bufs))
	}
	e.d.RunOnce(ctx) // healthy again after the success: ten
	if bufs, _ := e.sp.Buffers(); len(bufs) != 14 {
		t.Fatalf("a healthy cycle replayed %d files, want 10", 24-len(bufs))
	}
}

func TestReplayWaitsForAMaintSlot(t *testing.T) {
	e := newEnv(t, nil)
	e.d.Arbiter = admission.New(1, 0.05)
	release, _ := e.d.Arbiter.Acquire(context.Background(), admission.Push) // live traffic holds the only slot
	e.sp.Append([]spool.Event{ev(t1, "x")})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e.d.RunOnce(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("replay did not wait for its slot: %v", err)
	}
	release()
	if err := e.d.RunOnce(context.Background()); err != nil || e.count(t, t1) != 1 {
		t.Fatalf("after the slot freed: %v", err)
	}
}

func TestPausedDrainWaitsAndResumeFinalizes(t *testing.T) {
	e := newEnv(t, nil)
	e.sp.SetPaused(true)
	e.sp.Append([]spool.Event{ev(t1, "x")})
	e.d.RunOnce(context.Background())
	if e.count(t, t1) != 0 {
		t.Fatal("drained while paused")
	}
	if err := e.sp.SetPaused(false); err != nil {
		t.Fatal(err)
	}
	if bufs, _ := e.sp.Buffers(); len(bufs) != 1 {
		t.Fatal("resume did not finalize the active file")
	}
	e.d.RunOnce(context.Background())
	if e.count(t, t1) != 1 {
		t.Fatal("not drained after resume")
	}
}

func TestWriteFailureAbandonsTheFile(t *testing.T) {
	ffs := faults.NewFaultyFS(spool.OSFS{})
	e := newEnv(t, ffs)
	e.sp.Append([]spool.Event{ev(t1, "a")})
	ffs.TearNextWrite()
	if err := e.sp.Append([]spool.Event{ev(t1, "b")}); err == nil {
		t.Fatal("a torn write must fail the append")
	}
	ffs.FailNext("write", faults.ErrNoSpace, 1)
	if err := e.sp.Append([]spool.Event{ev(t1, "c")}); err == nil {
		t.Fatal("ENOSPC must fail the append")
	}
	if err := e.sp.Append([]spool.Event{ev(t1, "d")}); err != nil {
		t.Fatal(err)
	}
	e.d.RunOnce(context.Background())
	// a and d replay; the torn b and the never-written c do not.
	if n := e.count(t, t1); n != 2 {
		t.Fatalf("replayed %d, want 2", n)
	}
}

// A failed write can leave intact records the pending count never saw;
// they replay, and the count must not stay below what waits afterwards.
func TestPendingCountSettlesAfterUncountedRecords(t *testing.T) {
	ffs := faults.NewFaultyFS(spool.OSFS{})
	e := newEnv(t, ffs)
	big := func(txid string) spool.Event { // two records of this size: a torn write keeps the first
		ev := ev(t1, txid)
		ev.Payload = json.RawMessage(`"` + strings.Repeat("x", 64) + `"`)
		return ev
	}
	e.sp.Append([]spool.Event{big("a")})
	ffs.TearNextWrite()
	if err := e.sp.Append([]spool.Event{big("b"), big("c")}); err == nil {
		t.Fatal("a torn write must fail the append")
	}
	e.d.RunOnce(context.Background()) // replays a and the intact b
	if n := e.count(t, t1); n != 2 {
		t.Fatalf("replayed %d, want a and b", n)
	}
	e.sp.Append([]spool.Event{big("d")})
	if e.sp.Pending() != 1 {
		t.Fatalf("pending %d with d waiting, want 1", e.sp.Pending())
	}
	if n, err := e.sp.Waiting(); err != nil || n != 1 {
		t.Fatalf("waiting on disk %d %v, want 1", n, err)
	}
}

// Files are named by a write sequence, not the wall clock: a clock stepped
// back cannot reorder replay, and a reopened spool continues the sequence
// after the files already there (old clock-named ones included).
func TestFileNamesFollowWriteOrderNotTheClock(t *testing.T) {
	dir := t.TempDir()
	c := &steppedClock{now: time.Unix(2_000_000_000, 0)}
	if err := os.WriteFile(filepath.Join(dir, "01800000000000000000-000001.buf"), nil, 0o644); err != nil {
		t.Fatal(err) // a file from before sequence names
	}
	reopen := func() *spool.Spool {
		s, err := spool.Open(spool.Options{Dir: dir, Clock: c, EventsPerFile: 1, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := reopen()
	if err := s.Append([]spool.Event{ev(t1, "a")}); err != nil {
		t.Fatal(err)
	}
	c.now = c.now.Add(-time.Hour) // the wall clock steps back
	if err := s.Append([]spool.Event{ev(t1, "b")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen()
	if err := s.Append([]spool.Event{ev(t1, "c")}); err != nil {
		t.Fatal(err)
	}
	files, err := s.Buffers()
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, f := range files[1:] { // after the old clock-named file
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"a", "b", "c"} {
			if strings.Contains(string(raw), `"transactionId":"`+id+`"`) {
				order = append(order, id)
			}
		}
	}
	if strings.Join(order, "") != "abc" {
		t.Fatalf("replay order %v (files %v), want a b c", order, files)
	}
}

// steppedClock is a wall clock a test can step backwards.
type steppedClock struct{ now time.Time }

func (c *steppedClock) Now() time.Time                       { return c.now }
func (c *steppedClock) NewTimer(d time.Duration) clock.Timer { return clock.Real{}.NewTimer(d) }

// TestReplayKeepsTheStampedProducer: a push buffered under a token's sub
// replays with that producer_sub.
func TestReplayKeepsTheStampedProducer(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	stamped := ev(t1, "signed")
	stamped.ProducerSub = "alice"
	if err := e.sp.Append([]spool.Event{stamped, ev(t1, "anonymous")}); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := e.st.Pop(ctx, store.PopRequest{Tenant: t1, Queue: stamped.Queue, Partition: stamped.Partition, Batch: 10})
	if err != nil || len(p.Messages) != 2 {
		t.Fatalf("pop: %+v %v", p, err)
	}
	for _, m := range p.Messages {
		got := ""
		if m.ProducerSub != nil {
			got = *m.ProducerSub
		}
		if want := map[string]string{"signed": "alice", "anonymous": ""}[m.TransactionID]; got != want {
			t.Errorf("%s replayed with producer %q, want %q", m.TransactionID, got, want)
		}
	}
}
