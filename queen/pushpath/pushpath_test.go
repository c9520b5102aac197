package pushpath_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newSpool(t *testing.T) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(spool.Options{Dir: t.TempDir(), FS: spool.OSFS{}, Clock: clock.Real{}, EventsPerFile: 100, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close() })
	return sp
}

func newStore(pool *pgxpool.Pool, c *crypt.Cipher) *store.Store {
	return store.New(pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil), TxTimeout: 2 * time.Second})
}

func items() []store.PushItem {
	return []store.PushItem{{Queue: "q", Payload: crypt.Plain(json.RawMessage(`{"pin":"4242"}`))}, {Queue: "q", TransactionID: "given"}}
}

// TestCommitsWhenTheDatabaseAnswers: a push commits and answers per item; a
// missing transactionId is minted before anything is written.
func TestCommitsWhenTheDatabaseAnswers(t *testing.T) {
	st := newStore(storetest.Pool(t), nil)
	p := pushpath.New(pushpath.Options{Store: st, Retry: storetest.Retry(st), Spool: newSpool(t), IDs: ids.NewSource(clock.Real{}, nil), Log: quiet})
	out, err := p.Push(context.Background(), config.DefaultTenant, "", items())
	if err != nil || out.Buffered != nil || len(out.Results) != 2 {
		t.Fatalf("push: %+v %v", out, err)
	}
	if out.Results[0].Status != "queued" || out.Results[0].TransactionID == "" || out.Results[1].TransactionID != "given" {
		t.Fatalf("results: %+v", out.Results)
	}
}

// TestDivertedPushesAreSealedOnDiskAndReplayOnce: under push maintenance a
// push goes to the spool sealed (no plaintext on disk), and Replay stores it
// once under its minted transactionId.
func TestDivertedPushesAreSealedOnDiskAndReplayOnce(t *testing.T) {
	c, _ := crypt.New(strings.Repeat("5a", 32))
	pool := storetest.Pool(t)
	sp := newSpool(t)
	st := newStore(pool, c)
	p := pushpath.New(pushpath.Options{Store: st, Retry: storetest.Retry(st), Writes: storetest.Writes(st, c), Spool: sp,
		Diverted: func() bool { return true }, Cipher: c, IDs: ids.NewSource(clock.Real{}, nil), Log: quiet})
	out, err := p.Push(context.Background(), config.DefaultTenant, "sub-1", items())
	if err != nil || out.SpoolErr != nil || len(out.Buffered) != 2 || out.Results != nil {
		t.Fatalf("diverted push: %+v %v", out, err)
	}
	if err := sp.Finalize(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(sp.Dir(), "*"))
	for _, f := range files {
		if raw, _ := os.ReadFile(f); strings.Contains(string(raw), "4242") {
			t.Fatalf("%s holds the payload in the clear", f)
		}
	}
	for range 2 { // a replay that is repeated stores nothing twice
		evs := out.Buffered
		replay := []store.PushItem{}
		for _, e := range evs {
			replay = append(replay, store.PushItem{Queue: e.Queue, Partition: e.Partition, Payload: e.Body(),
				TransactionID: e.TransactionID, ProducerSub: e.ProducerSub})
		}
		if err := p.Replay(context.Background(), config.DefaultTenant, replay); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	var sub string
	if err := pool.QueryRow(context.Background(), `SELECT count(*), min(producer_sub) FROM queen.messages`).Scan(&n, &sub); err != nil || n != 2 || sub != "sub-1" {
		t.Fatalf("after replay: %d rows, producer %q, %v", n, sub, err)
	}
}

// TestAnOutageBuffersAndTurnsTheSpoolUnhealthy: a push the database cannot
// take (nothing listens) and whose probe fails is buffered, and the spool
// turns unhealthy so later pushes go to disk at once; with the probe
// answering, only that push is buffered and the spool stays healthy.
func TestAnOutageBuffersAndTurnsTheSpoolUnhealthy(t *testing.T) {
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	down, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	for _, c := range []struct {
		name    string
		ping    func(context.Context) error
		healthy bool
	}{
		{"outage", func(context.Context) error { return io.EOF }, false},
		{"database answers", func(context.Context) error { return nil }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := newSpool(t)
			st := newStore(down, nil)
			p := pushpath.New(pushpath.Options{Store: st, Retry: storetest.Retry(st), Spool: sp, Ping: c.ping, IDs: ids.NewSource(clock.Real{}, nil), Log: quiet})
			out, err := p.Push(context.Background(), config.DefaultTenant, "", items())
			if err != nil || len(out.Buffered) != 2 || !out.DBError {
				t.Fatalf("push with the database down: %+v %v", out, err)
			}
			if sp.Healthy() != c.healthy {
				t.Fatalf("spool healthy %v, want %v", sp.Healthy(), c.healthy)
			}
		})
	}
	st := newStore(down, nil)
	p := pushpath.New(pushpath.Options{Store: st, Retry: storetest.Retry(st), IDs: ids.NewSource(clock.Real{}, nil), Log: quiet})
	if _, err := p.Push(context.Background(), config.DefaultTenant, "", items()); err == nil || !store.Unavailable(err) {
		t.Fatalf("without a spool the outage is the caller's error: %v", err)
	}
}

// TestASpoolThatCannotWriteSendsPushesToTheDatabase (issue 28 item 11): the
// spool is marked unhealthy (an outage that has since passed) and its disk
// refuses writes (read-only). While the database answers the push is
// committed there, not answered "failed"; with the database down too it
// is answered failed, naming the spool file.
func TestASpoolThatCannotWriteSendsPushesToTheDatabase(t *testing.T) {
	for _, c := range []struct {
		name string
		ping func(context.Context) error
	}{{"database answers", func(context.Context) error { return nil }}, {"database down", func(context.Context) error { return io.EOF }}} {
		t.Run(c.name, func(t *testing.T) {
			ffs := faults.NewFaultyFS(spool.OSFS{})
			sp, err := spool.Open(spool.Options{Dir: t.TempDir(), FS: ffs, Clock: clock.Real{}, Log: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sp.Abandon)
			sp.SetHealthy(false)
			ffs.FailNext("create", &os.PathError{Op: "open", Path: "(injected)", Err: syscall.EROFS}, 1)
			st := newStore(storetest.Pool(t), nil)
			p := pushpath.New(pushpath.Options{Store: st, Retry: storetest.Retry(st), Spool: sp, Ping: c.ping,
				IDs: ids.NewSource(clock.Real{}, nil), Log: quiet})
			out, err := p.Push(context.Background(), config.DefaultTenant, "", items())
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "database answers" {
				if out.SpoolErr != nil || len(out.Results) != 2 || out.Results[0].Status != "queued" {
					t.Fatalf("push: %+v, want committed", out)
				}
				return
			}
			if out.SpoolErr == nil || !strings.Contains(out.SpoolErr.Error(), sp.Dir()) || out.Results != nil {
				t.Fatalf("push: %+v, want failed naming the spool file", out)
			}
		})
	}
}
