package queen_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/pglocal"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store/storetest"
)

// Spool tests from issue 28 ("hardened against a hostile world"): a
// shared directory, a corrupt record and a spool filesystem that refuses,
// each against a real broker.

// waitFor polls cond for up to a minute: generous, for a loaded machine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startWithSpoolFS is start with the spool on fs.
func startWithSpoolFS(t *testing.T, cfg config.Config, fs spool.FS) *queen.Broker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := queen.New(queen.Options{Config: cfg, Listener: l, SpoolFS: fs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown(context.Background()) })
	return b
}

func countRows(t *testing.T, b *queen.Broker, like string) int {
	t.Helper()
	var n int
	if err := b.Store().Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM queen.messages WHERE transaction_id LIKE $1`, like).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Item 1: two brokers given one FILE_BUFFER_DIR lost buffered pushes (one
// finalized and drained the file the other appended to). The directory is
// locked for the broker's life: a second broker, in this process or the
// real binary in another, refuses to start, naming the holder; once the
// first stops, the directory is free.
func TestSpoolDirectoryIsOneBrokersOnly(t *testing.T) {
	dsn := storetest.DSN(t)
	cfg := testConfig(t, dsn)
	a := start(t, cfg)
	defer a.Shutdown(context.Background())
	if pushOne(t, "http://"+a.Addr(), "", "lock-1") != "queued" {
		t.Fatal("the first broker does not serve")
	}
	holder := []string{fmt.Sprintf("pid=%d", os.Getpid()), "serverId=t", "listen=" + a.Addr()}

	second := cfg
	second.ServerID = "second"
	b := queen.New(queen.Options{Config: second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := b.Start(ctx)
	if err == nil {
		b.Shutdown(context.Background())
		t.Fatal("a second broker started on a spool directory in use")
	}
	for _, want := range append(holder, "FILE_BUFFER_DIR") {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal does not name %q: %v", want, err)
		}
	}

	// The real binary, in a process of its own.
	bin := queenBinary(t)
	port, err := pglocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	pc, _ := pgx.ParseConfig(dsn)
	cmdCtx, cmdCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cmdCancel()
	cmd := exec.CommandContext(cmdCtx, bin, "serve")
	cmd.Env = append(os.Environ(), "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", port), "PG_HOST="+pc.Host,
		fmt.Sprintf("PG_PORT=%d", pc.Port), "PG_USER="+pc.User, "PG_PASSWORD="+pc.Password, "PG_DATABASE="+pc.Database,
		"QUEEN_SERVER_ID=binary", "FILE_BUFFER_DIR="+cfg.FileBufferDir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("queen serve on a directory in use: %v, want exit status 1\n%s", err, out)
	}
	for _, want := range append(holder, "each broker needs a FILE_BUFFER_DIR of its own") {
		if !strings.Contains(string(out), want) {
			t.Fatalf("queen serve's refusal does not name %q:\n%s", want, out)
		}
	}
	if pushOne(t, "http://"+a.Addr(), "", "lock-2") != "queued" {
		t.Fatal("the first broker stopped serving")
	}

	a.Shutdown(context.Background())
	c := start(t, second)
	c.Shutdown(context.Background())
}

// Items 2 and 13: one bit flipped in record 10 of a 50-record spool file
// cost the other 40 records (the file was deleted, nothing in failed/).
// The broker stores 49, quarantines the damaged record, and
// GET /api/v1/status/buffers shows why.
func TestSpoolCorruptRecordIsQuarantinedWithItsReason(t *testing.T) {
	cfg := testConfig(t, storetest.DSN(t))
	var file []byte
	var tenth int
	for i := 0; i < 50; i++ {
		if i == 9 {
			tenth = len(file)
		}
		rec, err := spool.Encode([]spool.Event{{Queue: "orders", Partition: "p", TransactionID: fmt.Sprintf("c-%02d", i),
			Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}})
		if err != nil {
			t.Fatal(err)
		}
		file = append(file, rec...)
	}
	file[tenth+20] ^= 0x08
	if err := os.WriteFile(filepath.Join(cfg.FileBufferDir, "00000000000000000001.buf"), file, 0o600); err != nil {
		t.Fatal(err)
	}
	b := start(t, cfg)
	defer b.Shutdown(context.Background())
	base := "http://" + b.Addr()
	want := fmt.Sprintf("checksum mismatch at offset %d", tenth)
	var status map[string]any
	// The damaged bytes' file appears a moment before its reasons line is
	// written beside it: wait for both.
	waitFor(t, "the damaged record quarantined with its reason", func() bool {
		status = bufferStatus(t, base)
		q, _ := status["quarantined"].([]any)
		if len(q) == 0 {
			return false
		}
		reasons, _ := q[0].(map[string]any)["reasons"].([]any)
		return len(reasons) > 0
	})
	q := status["quarantined"].([]any)
	reasons, _ := q[0].(map[string]any)["reasons"].([]any)
	if len(q) != 1 || len(reasons) != 1 || !strings.Contains(fmt.Sprint(reasons[0].(map[string]any)["reason"]), want) {
		t.Fatalf("status/buffers quarantined = %v, want one file with the reason %q", q, want)
	}
	waitFor(t, "the 49 intact records stored", func() bool { return countRows(t, b, "c-%") == 49 })
	// The drain removes the file just after its rows commit: wait for that.
	waitFor(t, "the drained file removed", func() bool {
		files, _ := b.Spool().Buffers()
		return len(files) == 0
	})
}

// countingFS counts the opens of finalized spool files.
type countingFS struct {
	spool.FS
	mu    sync.Mutex
	opens int
}

func (c *countingFS) Open(name string) (io.ReadCloser, error) {
	if strings.HasSuffix(name, ".buf") {
		c.mu.Lock()
		c.opens++
		c.mu.Unlock()
	}
	return c.FS.Open(name)
}

func (c *countingFS) reset() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.opens
	c.opens = 0
	return n
}

// Item 11: with the spool's filesystem read-only and PostgreSQL healthy,
// every push answered 500, dbHealthy read false, and the same file was
// replayed again and again. A spool fault is the spool's: the buffered
// records are stored once, the database is reported healthy, pushes are
// queued in PostgreSQL, and the file is not replayed again while its
// removal keeps failing.
func TestSpoolReadOnlyIsNotADatabaseOutage(t *testing.T) {
	ffs := faults.NewFaultyFS(spool.OSFS{})
	cfs := &countingFS{FS: ffs}
	cfg, proxy := proxiedConfig(t, func(c *config.Config) { c.FileBufferEventsPerFile = 100 })
	b := startWithSpoolFS(t, cfg, cfs)
	base := "http://" + b.Addr()

	proxy.SetMode(faults.Refuse, 0)
	// One request of five, so one append: five requests could straddle a
	// drain cycle's finalize, leaving two of them in a second file that the
	// read-only filesystem below keeps from ever being finalized.
	code, body := do(t, "POST", base+"/api/v1/push", "", `{"items":[`+
		`{"queue":"orders","transactionId":"ro-0"},{"queue":"orders","transactionId":"ro-1"},{"queue":"orders","transactionId":"ro-2"},`+
		`{"queue":"orders","transactionId":"ro-3"},{"queue":"orders","transactionId":"ro-4"}]}`)
	if code != 201 || strings.Count(string(body), `"buffered"`) != 5 {
		t.Fatalf("pushes during the outage: %d %s", code, body)
	}
	waitFor(t, "the spool file finalized", func() bool {
		files, _ := filepath.Glob(filepath.Join(cfg.FileBufferDir, "*.buf"))
		return len(files) == 1
	})
	readOnly := &os.PathError{Op: "(injected)", Path: "(injected)", Err: syscall.EROFS}
	for _, op := range []string{"create", "write", "rename", "remove"} {
		ffs.FailNext(op, readOnly, 10000)
	}
	cfs.reset()
	proxy.SetMode(faults.Pass, 0)

	waitFor(t, "the buffered pushes stored", func() bool { return countRows(t, b, "ro-%") == 5 })
	waitFor(t, "dbHealthy", func() bool { return bufferStatus(t, base)["dbHealthy"] == true })
	for i := 0; i < 5; i++ {
		code, body := doSettled(t, "POST", base+"/api/v1/push", "", fmt.Sprintf(`{"items":[{"queue":"orders","transactionId":"live-%d"}]}`, i))
		if code != 201 || !strings.Contains(string(body), `"queued"`) {
			t.Fatalf("push with the spool read-only and PostgreSQL up: %d %s", code, body)
		}
	}
	waitFor(t, "three drain cycles retrying the removal", func() bool { return b.Drainer().SpoolFaults.Load() >= 3 })
	if n := cfs.reset(); n != 1 {
		t.Fatalf("the stored file was read %d times, want once: the drain replays it again and again", n)
	}
	if files, _ := filepath.Glob(filepath.Join(cfg.FileBufferDir, "*.buf")); len(files) != 1 {
		t.Fatalf("the file that cannot be removed is gone: %v", files)
	}
	if bufferStatus(t, base)["dbHealthy"] != true {
		t.Fatal("dbHealthy went false on a spool fault")
	}
}
