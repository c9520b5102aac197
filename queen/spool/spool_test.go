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
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/pushpath"
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
	t.Cleanup(s.Abandon)
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
	s.Abandon() // the crash: its lock goes with the process
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
		Ping:   e.st.Ping,
		Replay: pushpath.New(pushpath.Options{Store: e.st, Retry: storetest.Retry(e.st)}).Replay}
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
	if err := e.d.Replay(ctx, t1, []store.PushItem{{Queue: "q", Partition: "p", TransactionID: "a"}}); err != nil {
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
	// Quarantined() reads the same reasons back (status/buffers and the
	// dashboard show them; issue 28 item 13: they said "no reasons").
	q, err := e.sp.Quarantined()
	if err != nil || len(q) != 1 || len(q[0].Reasons) != 1 || q[0].Reasons[0] != why || strings.Contains(q[0].Name, "/") {
		t.Fatalf("Quarantined() = %+v, %v; want one file (by its name in failed/) with the reason %+v", q, err, why)
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

// A file that cannot be read, and a quarantine move the filesystem
// refuses, are spool faults: the file stays (never deleted while it holds
// records neither stored nor quarantined), the spool stays healthy, and
// the drain retries after a pause.
func TestSpoolFaultsNeverDeleteAFile(t *testing.T) {
	ffs := faults.NewFaultyFS(spool.OSFS{})
	e := newEnv(t, ffs)
	ctx := context.Background()
	e.sp.Append([]spool.Event{ev(t1, "x")})
	e.sp.Finalize()
	ffs.FailNext("open", faults.ErrIO, 5)
	for i := 0; i < 5; i++ {
		e.d.RunOnce(ctx)
		e.clock.Advance(spool.SpoolFaultPauseMax)
	}
	if bufs, _ := e.sp.Buffers(); len(bufs) != 1 || e.d.Quarantined.Load() != 0 || e.d.Deleted.Load() != 0 {
		t.Fatalf("an unreadable file must stay: files %v quarantined %d deleted %d", bufs, e.d.Quarantined.Load(), e.d.Deleted.Load())
	}
	if !e.sp.Healthy() || e.d.SpoolFaults.Load() != 5 {
		t.Fatalf("healthy %v, spool faults %d (want true, 5)", e.sp.Healthy(), e.d.SpoolFaults.Load())
	}
	e.d.RunOnce(ctx) // readable again
	if bufs, _ := e.sp.Buffers(); len(bufs) != 0 || e.count(t, t1) != 1 {
		t.Fatalf("once readable: files %v, stored %d", bufs, e.count(t, t1))
	}

	// A poison file whose quarantine move fails stays, and moves later.
	e.sp.Append([]spool.Event{poison()})
	e.sp.Finalize()
	for i := 1; i < spool.QuarantineAfter; i++ {
		e.d.RunOnce(ctx)
	}
	ffs.FailNext("rename", faults.ErrIO, 1)
	e.d.RunOnce(ctx) // the fifth permanent failure: the move fails
	if bufs, _ := e.sp.Buffers(); len(bufs) != 1 || e.sp.Failed() != 0 || e.d.Deleted.Load() != 0 {
		t.Fatalf("a file whose move failed must stay: files %v failed %d deleted %d", bufs, e.sp.Failed(), e.d.Deleted.Load())
	}
	e.d.RunOnce(ctx) // parked: nothing happens
	if e.sp.Failed() != 0 {
		t.Fatal("the drain did not pause after a spool fault")
	}
	e.clock.Advance(spool.SpoolFaultPauseMax)
	e.d.RunOnce(ctx)
	if bufs, _ := e.sp.Buffers(); len(bufs) != 0 || e.sp.Failed() != 1 || e.d.Quarantined.Load() != 1 {
		t.Fatalf("the move was not retried: files %v failed %d quarantined %d", bufs, e.sp.Failed(), e.d.Quarantined.Load())
	}
	if q, _ := e.sp.Quarantined(); len(q) != 1 || len(q[0].Reasons) != 1 || q[0].Reasons[0].SQLState == "" {
		t.Fatalf("quarantined without its reason: %+v", q)
	}
}

// Item 11 of issue 28: with the spool's filesystem refusing removals (as
// read-only) and PostgreSQL healthy, a replayed file that cannot be
// deleted is a spool fault. The spool stays (or turns) healthy, so pushes
// keep going to PostgreSQL; the drain pauses, doubling; and the file is
// not replayed again, only its removal retried.
func TestUndeletableFileIsNotADatabaseOutage(t *testing.T) {
	ffs := faults.NewFaultyFS(spool.OSFS{})
	e := newEnv(t, ffs)
	ctx := context.Background()
	replays := 0
	replay := e.d.Replay
	e.d.Replay = func(ctx context.Context, tenant string, items []store.PushItem) error {
		replays++
		return replay(ctx, tenant, items)
	}
	for i := 0; i < 3; i++ {
		e.sp.Append([]spool.Event{ev(t1, fmt.Sprint("r", i))})
	}
	e.sp.SetHealthy(false) // the outage these were buffered in
	readOnly := &os.PathError{Op: "remove", Path: "(injected)", Err: syscall.EROFS}
	ffs.FailNext("remove", readOnly, 2)
	e.d.RunOnce(ctx)
	if e.count(t, t1) != 3 || !e.sp.Healthy() {
		t.Fatalf("stored %d, healthy %v: want 3 stored and the spool healthy (the database answered)", e.count(t, t1), e.sp.Healthy())
	}
	bufs, _ := e.sp.Buffers()
	if len(bufs) != 1 || e.d.SpoolFaults.Load() != 1 {
		t.Fatalf("files %v spool faults %d: want the file kept and one fault", bufs, e.d.SpoolFaults.Load())
	}
	now := e.clock.Now()
	if due := e.d.NextDue(now); due.Sub(now) < spool.SpoolFaultPause {
		t.Fatalf("the drain is due again in %v after a spool fault", due.Sub(now))
	}
	before := replays
	e.clock.Advance(spool.SpoolFaultPause)
	e.d.RunOnce(ctx) // the removal fails again: no replay
	if replays != before || e.d.SpoolFaults.Load() != 2 || !e.sp.Healthy() {
		t.Fatalf("replays %d -> %d, spool faults %d, healthy %v", before, replays, e.d.SpoolFaults.Load(), e.sp.Healthy())
	}
	now = e.clock.Now()
	if due := e.d.NextDue(now); due.Sub(now) < 2*spool.SpoolFaultPause {
		t.Fatalf("the pause did not double: due in %v", due.Sub(now))
	}
	e.clock.Advance(2 * spool.SpoolFaultPause)
	e.d.RunOnce(ctx) // the filesystem heals: removed, still no replay
	if bufs, _ := e.sp.Buffers(); len(bufs) != 0 || replays != before || e.sp.Pending() != 0 {
		t.Fatalf("after the heal: files %v, replays %d -> %d, pending %d", bufs, before, replays, e.sp.Pending())
	}
}

// A finalization the filesystem refused is retried by the next cycle: the
// file's records are not stranded in a .tmp until a restart.
func TestFinalizeRetriesAfterTheFilesystemRefused(t *testing.T) {
	ffs := faults.NewFaultyFS(spool.OSFS{})
	e := newEnv(t, ffs)
	ctx := context.Background()
	e.sp.Append([]spool.Event{ev(t1, "a")})
	ffs.FailNext("rename", faults.ErrIO, 1)
	e.d.RunOnce(ctx)
	if tmp, _ := filepath.Glob(filepath.Join(e.dir, "*.tmp")); len(tmp) != 1 || e.count(t, t1) != 0 {
		t.Fatalf("tmp files %v stored %d", tmp, e.count(t, t1))
	}
	e.clock.Advance(spool.SpoolFaultPause)
	e.d.RunOnce(ctx)
	if e.count(t, t1) != 1 {
		t.Fatal("the file whose finalization failed was never replayed")
	}
}

// Item 15 of issue 28 (the spool part): every spool write error names the
// file, so the push's "File buffer write failed: ..." says where.
func TestSpoolWriteErrorNamesTheFile(t *testing.T) {
	ffs := faults.NewFaultyFS(spool.OSFS{})
	e := newEnv(t, ffs)
	for _, op := range []string{"write", "sync", "create"} {
		ffs.FailNext(op, faults.ErrNoSpace, 1)
		err := e.sp.Append([]spool.Event{ev(t1, op)})
		if err == nil {
			t.Fatalf("%s: the append did not fail", op)
		}
		if !regexp.MustCompile(regexp.QuoteMeta(e.dir) + `/\d{20}\.tmp`).MatchString(err.Error()) {
			t.Fatalf("%s: the error names no file: %v", op, err)
		}
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
	p, err := consume.NewClaimer(e.st, consume.ClaimerOptions{}).Claim(ctx, consume.PopRequest{Tenant: t1, Queue: stamped.Queue, Partition: stamped.Partition, Batch: 10})
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

// Item 1 of issue 28: a directory is one spool's. A second Open (another
// broker) is refused, naming the holder, before it touches any file: the
// first one's active .tmp is not finalized under it. Close releases it.
func TestSecondOpenIsRefusedNamingTheHolder(t *testing.T) {
	dir := t.TempDir()
	c := clock.NewSim(time.Unix(1000, 0))
	first, err := spool.Open(spool.Options{Dir: dir, Clock: c, Log: quiet, Holder: "serverId=first listen=127.0.0.1:6632"})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Append([]spool.Event{ev(t1, "a")}); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	_, err = spool.Open(spool.Options{Dir: dir, Clock: c, Log: quiet})
	if !errors.Is(err, spool.ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	for _, want := range []string{fmt.Sprintf("pid=%d", os.Getpid()), "host=" + host, "serverId=first", "listen=127.0.0.1:6632", "FILE_BUFFER_DIR"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal does not name %q: %v", want, err)
		}
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) != 1 {
		t.Fatalf("the refused open touched the live file: .tmp files %v", tmp)
	}
	if err := first.Append([]spool.Event{ev(t1, "b")}); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := first.Append([]spool.Event{ev(t1, "c")}); err == nil {
		t.Fatal("a closed spool took an append")
	}
	second := open(t, dir, nil, c)
	if n, err := second.Waiting(); err != nil || n != 2 {
		t.Fatalf("after the first closed: waiting %d %v, want 2", n, err)
	}
}

// Item 7 of issue 28: the spool is private to the broker's user: the
// directory and failed/ 0700, every file 0600 (lock, active, finalized,
// quarantined, reasons), and a directory an older broker made 0755 with
// 0644 files is tightened at Open. A directory shared with other files is
// refused, not changed.
func TestSpoolIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	for _, d := range []string{dir, filepath.Join(dir, "failed")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o755)
	}
	old := filepath.Join(dir, "00000000000000000001.buf")
	data, _ := spool.Encode([]spool.Event{ev(t1, "old")})
	oldReasons := filepath.Join(dir, "failed", "00000000000000000000.reasons.jsonl")
	for _, f := range []string{old, oldReasons} {
		os.WriteFile(f, data, 0o644)
		os.Chmod(f, 0o644)
	}
	e := newEnvIn(t, dir)
	e.sp.Append([]spool.Event{poison()})
	e.sp.Append([]spool.Event{ev(t1, "x")})
	for i := 0; i < spool.QuarantineAfter; i++ {
		e.d.RunOnce(context.Background())
	}
	e.sp.Append([]spool.Event{ev(t1, "active")})
	if e.sp.Failed() != 1 {
		t.Fatalf("failed files %d, want the poison one quarantined", e.sp.Failed())
	}
	var seen []string
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %04o, want %04o", path, fi.Mode().Perm(), want)
		}
		seen = append(seen, filepath.Base(path))
		return nil
	})
	for _, want := range []string{spool.LockFile, ".tmp", ".reasons.jsonl", "failed"} {
		if !strings.Contains(strings.Join(seen, " "), want) {
			t.Fatalf("no %s among %v", want, seen)
		}
	}

	shared := t.TempDir()
	os.Chmod(shared, 0o755)
	os.WriteFile(filepath.Join(shared, "notes.txt"), nil, 0o644)
	if _, err := spool.Open(spool.Options{Dir: shared, Log: quiet}); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("a shared directory was taken: %v", err)
	}
	if fi, _ := os.Stat(shared); fi.Mode().Perm() != 0o755 {
		t.Fatalf("a refused directory was changed to %04o", fi.Mode().Perm())
	}
}

// newEnvIn is newEnv over a given directory.
func newEnvIn(t *testing.T, dir string) *env {
	t.Helper()
	e := newEnv(t, nil)
	e.sp.Abandon()
	e.dir = dir
	e.sp = open(t, dir, nil, e.clock)
	e.d.Spool = e.sp
	return e
}

// records returns the [start, end) of each record in a spool file's bytes.
func records(t *testing.T, raw []byte) [][2]int {
	t.Helper()
	var out [][2]int
	for off := 0; off < len(raw); {
		n := int(raw[off])<<24 | int(raw[off+1])<<16 | int(raw[off+2])<<8 | int(raw[off+3])
		out = append(out, [2]int{off, off + 8 + n})
		off += 8 + n
	}
	return out
}

// Item 2 of issue 28: one damaged record in a file of 50 never costs the
// others. A checksum failure with data after it is corruption: the records
// after it are read on and stored, and the damaged bytes are quarantined
// in failed/<name>.corrupt with the reason, which Quarantined() shows
// (item 13). Only a record cut short at the very end is a torn tail.
func TestOneCorruptRecordIsQuarantinedAndTheRestStored(t *testing.T) {
	for _, c := range []struct {
		name    string
		damage  func(raw []byte, recs [][2]int) []byte
		stored  int
		reason  string // "" when nothing is quarantined
		rawSpan func(recs [][2]int) [2]int
	}{
		{"a bit of record 10's payload", func(raw []byte, recs [][2]int) []byte {
			raw[recs[9][0]+20] ^= 0x10
			return raw
		}, 49, "checksum mismatch at offset %d", func(recs [][2]int) [2]int { return recs[9] }},
		{"record 10's length", func(raw []byte, recs [][2]int) []byte {
			raw[recs[9][0]] ^= 0x40
			return raw
		}, 49, "damaged length at offset %d", func(recs [][2]int) [2]int { return recs[9] }},
		{"a bit of the last record", func(raw []byte, recs [][2]int) []byte {
			raw[recs[49][0]+20] ^= 0x10
			return raw
		}, 49, "checksum mismatch at offset %d", func(recs [][2]int) [2]int { return recs[49] }},
		{"a torn tail", func(raw []byte, recs [][2]int) []byte {
			return raw[:len(raw)-3]
		}, 49, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.d.MaxBatch = 7
			var evs []spool.Event
			for i := 0; i < 50; i++ {
				evs = append(evs, ev(t1, fmt.Sprintf("m%02d", i)))
			}
			if err := e.sp.Append(evs); err != nil { // one append: one file
				t.Fatal(err)
			}
			e.sp.Finalize()
			bufs, _ := e.sp.Buffers()
			raw, _ := os.ReadFile(bufs[0])
			recs := records(t, raw)
			if len(bufs) != 1 || len(recs) != 50 {
				t.Fatalf("files %v, records %d", bufs, len(recs))
			}
			original := append([]byte{}, raw...)
			if err := os.WriteFile(bufs[0], c.damage(raw, recs), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := e.d.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := e.count(t, t1); n != c.stored {
				t.Fatalf("stored %d, want %d", n, c.stored)
			}
			if left, _ := e.sp.Buffers(); len(left) != 0 {
				t.Fatalf("left %v", left)
			}
			q, err := e.sp.Quarantined()
			if err != nil {
				t.Fatal(err)
			}
			if c.reason == "" {
				if len(q) != 0 {
					t.Fatalf("a torn tail was quarantined: %+v", q)
				}
				return
			}
			span := c.rawSpan(recs)
			want := fmt.Sprintf(c.reason, span[0])
			if len(q) != 1 || len(q[0].Reasons) != 1 || !strings.Contains(q[0].Reasons[0].Reason, want) {
				t.Fatalf("Quarantined() = %+v, want one file with the reason %q", q, want)
			}
			got, _ := os.ReadFile(filepath.Join(e.sp.FailedDir(), q[0].Name))
			damaged := c.damage(append([]byte{}, original...), recs)
			if string(got) != string(damaged[span[0]:span[1]]) {
				t.Fatalf("the quarantined bytes are not the damaged record's (%d bytes, want %d)", len(got), span[1]-span[0])
			}
			if e.sp.Pending() != 0 || e.d.Corrupt.Load() != 1 {
				t.Fatalf("pending %d corrupt %d", e.sp.Pending(), e.d.Corrupt.Load())
			}
		})
	}
}
