package faults_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// proxied starts a proxy in front of the test database and answers it
// with the DSN that goes through it.
func proxied(t *testing.T) (*faults.PGProxy, string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(storetest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := faults.NewPGProxy(fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable connect_timeout=1", p.Port(), cfg.User, cfg.Database)
}

func TestPGProxyModes(t *testing.T) {
	p, via := proxied(t)
	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		c, err := pgx.Connect(ctx, via)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		return c.Ping(ctx)
	}
	if err := ping(); err != nil {
		t.Fatalf("pass: %v", err)
	}
	p.SetMode(faults.Refuse, 0)
	if err := ping(); err == nil {
		t.Fatal("refuse: connected")
	}
	p.SetMode(faults.Blackhole, 0)
	if err := ping(); err == nil {
		t.Fatal("blackhole: connected")
	}
	p.SetMode(faults.Delay, 50*time.Millisecond)
	start := time.Now()
	if err := ping(); err != nil || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("delay: %v after %v", err, time.Since(start))
	}
	p.SetMode(faults.Pass, 0)
	if err := ping(); err != nil {
		t.Fatalf("healed: %v", err)
	}
	fired := p.Fired()
	for _, f := range []string{"pg.refuse", "pg.blackhole", "pg.delay"} {
		if fired[f] == 0 {
			t.Errorf("%s never fired: %v", f, fired)
		}
	}
}

func TestFaultyFS(t *testing.T) {
	dir := t.TempDir()
	fs := faults.NewFaultyFS(spool.OSFS{})
	name := filepath.Join(dir, "a.tmp")
	fs.FailNext("create", faults.ErrNoSpace, 1)
	if _, err := fs.Create(name); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("create: %v", err)
	}
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("durable;")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	fs.TearNextWrite()
	if n, err := f.Write([]byte("torn-write")); !errors.Is(err, syscall.EIO) || n != 5 {
		t.Fatalf("torn write: %d %v", n, err)
	}
	if _, err := f.Write([]byte("unsynced")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := fs.Crash(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(name)
	if string(got) != "durable;" {
		t.Fatalf("after crash: %q", got)
	}
	fired := fs.Fired()
	for _, k := range []string{"spool.enospc", "spool.torn", "spool.lost-unsynced"} {
		if fired[k] != 1 {
			t.Errorf("%s fired %d times: %v", k, fired[k], fired)
		}
	}
}

// An injected record lands in front of the next write to an active file,
// and only there; the writer sees its own byte count.
func TestFaultyFSInjectsBeforeTheNextAppend(t *testing.T) {
	dir := t.TempDir()
	fs := faults.NewFaultyFS(spool.OSFS{})
	fs.InjectNextAppend([]byte("planted;"))
	other, err := fs.Create(filepath.Join(dir, "x.reasons.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := other.Write([]byte("line;")); err != nil || n != 5 {
		t.Fatalf("write to a non-spool file: %d %v", n, err)
	}
	other.Close()
	name := filepath.Join(dir, "1.tmp")
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"mine;", "next;"} {
		if n, err := f.Write([]byte(w)); err != nil || n != len(w) {
			t.Fatalf("write %q: %d %v", w, n, err)
		}
	}
	f.Close()
	if got, _ := os.ReadFile(name); string(got) != "planted;mine;next;" {
		t.Fatalf("active file holds %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "x.reasons.jsonl")); string(got) != "line;" {
		t.Fatalf("other file holds %q", got)
	}
	if fs.Fired()["spool.injected"] != 1 {
		t.Fatalf("fired %v", fs.Fired())
	}
}

// A corrupted finalization damages a middle record of a file of several
// (its checksum fails with records after it), names the event it held,
// and leaves files of one record alone.
func TestFaultyFSCorruptsAFinalizedRecord(t *testing.T) {
	dir := t.TempDir()
	fs := faults.NewFaultyFS(spool.OSFS{})
	sp, err := spool.Open(spool.Options{Dir: dir, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	fs.CorruptNextFinalized(1)
	ev := func(id string) []spool.Event {
		return []spool.Event{{Queue: "q", Partition: "p", TransactionID: id, Payload: []byte(`{"n":1}`)}}
	}
	// A file of one record is not a candidate: the fault waits.
	if err := sp.Append(ev("alone")); err != nil || sp.Finalize() != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := sp.Append(ev(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sp.Finalize(); err != nil {
		t.Fatal(err)
	}
	got := fs.TakeCorrupted()
	if len(got) != 1 || got[0].Index != 1 || got[0].Event.TransactionID != "b" {
		t.Fatalf("corrupted %+v", got)
	}
	raw, err := os.ReadFile(got[0].File)
	if err != nil {
		t.Fatal(err)
	}
	intact, err := spool.Encode(append(append(ev("a"), ev("b")...), ev("c")...))
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != len(intact) || string(raw) == string(intact) {
		t.Fatalf("file not damaged in place: %d bytes, intact %d", len(raw), len(intact))
	}
	if fs.Fired()["spool.corrupted"] != 1 || len(fs.TakeCorrupted()) != 0 {
		t.Fatalf("fired %v", fs.Fired())
	}
}

// A held COMMIT is one a client sent as a simple query; statements that
// mention the word are not held, and the draw holds some commits, not all.
func TestPGProxyHoldsCommits(t *testing.T) {
	p, via := proxied(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, via)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	p.SetHold(50 * time.Millisecond)
	const n = 40
	for i := 0; i < n; i++ {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		if err := tx.QueryRow(ctx, "SELECT $1::text", "commit").Scan(&s); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT 'commit'"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p.SetHold(0)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Half of them, drawn at random: none held or all held would mean
	// the draw or the scan is broken (a 1 in 2^39 chance otherwise).
	if held := p.Fired()["pg.hold"]; held == 0 || held == n {
		t.Fatalf("held %d of %d commits, want some but not all", held, n)
	}
}
