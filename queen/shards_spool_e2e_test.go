package queen_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/spool"
)

// proxiedShards is the configuration of a broker on sh whose path to one
// shard (cut, "s0" or "s1") goes through a proxy that can cut it, tuned as
// the spool tests tune theirs but for connects bounded at 2s (the
// catalogue's too: a loaded machine took over 300ms), statements at 1s, a
// drain every 50ms.
func proxiedShards(t *testing.T, sh sharded, cut, rules string) (config.Config, *faults.PGProxy) {
	t.Helper()
	urls := map[string]string{"s0": pgURL(t, sh.s0), "s1": pgURL(t, sh.s1)}
	u, err := url.Parse(urls[cut])
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faults.NewPGProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	u.Host = fmt.Sprintf("127.0.0.1:%d", proxy.Port())
	urls[cut] = u.String()
	cfg := testConfig(t, sh.s0)
	if cfg.Shards, err = shards.Parse(pgURL(t, sh.catalog), "s0="+urls["s0"]+";s1="+urls["s1"], rules); err != nil {
		t.Fatal(err)
	}
	cfg.DBConnectionTimeout = 2 * time.Second
	cfg.DBStatementTimeout = time.Second
	cfg.FileBufferFlush = 50 * time.Millisecond
	cfg.FileBufferEventsPerFile = 7
	return cfg, proxy
}

// pushTo pushes one message with transactionId txid to queue and answers
// its status (queued, buffered, duplicate); anything but 201 fails.
func pushTo(t *testing.T, base, queue, txid string) string {
	t.Helper()
	code, status, body := pushStatus(t, base, queue, txid)
	if code != 201 {
		t.Fatalf("push %s to %s: %d %s", txid, queue, code, body)
	}
	return status
}

// pushStatus pushes one message with transactionId txid to queue and
// answers the HTTP status, the item's status and the body.
func pushStatus(t *testing.T, base, queue, txid string) (code int, status, body string) {
	t.Helper()
	code, body = post(t, base+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p1","transactionId":%q,"payload":{"t":%q}}]}`, queue, txid, txid))
	var res []struct{ Status string }
	if err := json.Unmarshal([]byte(body), &res); code == 201 && (err != nil || len(res) != 1) {
		t.Fatalf("push %s to %s: %d %s", txid, queue, code, body)
	}
	if code == 201 {
		status = res[0].Status
	}
	return code, status, body
}

// pushUntilQueued pushes to queue until a push answers queued (a loaded
// machine may time out a broker's first connects, buffer its first pushes
// or answer 503 for a catalogue not reached, writing nothing), waits until
// lane has replayed what it buffered meanwhile (running drain, when given),
// and returns the transactionIds answered 201: each stored once.
func pushUntilQueued(t *testing.T, base, queue string, lane *spool.Spool, drain *spool.Drainer) []string {
	t.Helper()
	var pushed []string
	for i := 0; ; i++ {
		txid := fmt.Sprint(queue, "-warm-", i)
		code, status, body := pushStatus(t, base, queue, txid)
		switch {
		case code == 201:
			pushed = append(pushed, txid)
		case code != 503:
			t.Fatalf("push %s to %s: %d %s", txid, queue, code, body)
		}
		if status == "queued" {
			break
		}
		if i == 100 {
			t.Fatalf("%s: no push queued after %d tries", queue, i+1)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitDrained(t, lane, drain)
	return pushed
}

// waitDrained waits until lane holds nothing to replay, running its drain
// (when given: the broker runs no background services) meanwhile.
func waitDrained(t *testing.T, lane *spool.Spool, drain *spool.Drainer) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); lane.Pending() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("lane %s: %d pushes never replayed", lane.Dir(), lane.Pending())
		}
		if drain != nil {
			if err := drain.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// storedOnce checks that queue's messages on dsn are exactly want, each
// once (by transactionId).
func storedOnce(t *testing.T, dsn, queue string, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, w := range want {
		seen[w] = 0
	}
	rows := transactionIDs(t, dsn, queue)
	for _, txid := range rows {
		seen[txid]++
	}
	for txid, n := range seen {
		if n != 1 {
			t.Errorf("%s: %s stored %d times on its shard, want once", queue, txid, n)
		}
	}
	if len(rows) != len(want) {
		t.Errorf("%s: %d messages on its shard, want %d", queue, len(rows), len(want))
	}
}

// transactionIDs are the transactionIds of queue's messages on dsn.
func transactionIDs(t *testing.T, dsn, queue string) []string {
	t.Helper()
	ctx := context.Background()
	conn := dbConn(t, dsn)
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT m.transaction_id FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1`, queue)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestShardsSpoolLanePerShard: with two shards and FILE_BUFFER_DIR, s1's
// database cut: pushes to a queue on s1 are answered buffered, into s1's
// lane (FILE_BUFFER_DIR/s1), while pushes to a queue on s0 commit there at
// once, s0's lane empty and healthy; a retry of a transactionId committed
// before the cut is buffered too. s1 back: its lane drains, and s1 holds
// every message of its queue exactly once, s0 none of them.
func TestShardsSpoolLanePerShard(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	cfg, proxy := proxiedShards(t, sh, "s1", "queue:b-*=s1")
	b := start(t, cfg)
	t.Cleanup(func() { shutdown(t, b) })
	base := "http://" + b.Addr()
	lane0, _ := b.Lane("s0")
	lane1, _ := b.Lane("s1")
	if lane0 == nil || lane1 == nil || lane0.Dir() != cfg.FileBufferDir+"/s0" || lane1.Dir() != cfg.FileBufferDir+"/s1" {
		t.Fatalf("lanes: want one per shard under %s", cfg.FileBufferDir)
	}
	wantA := pushUntilQueued(t, base, "a-orders", lane0, nil)
	wantB := pushUntilQueued(t, base, "b-orders", lane1, nil)

	proxy.SetMode(faults.Refuse, 0) // s1 goes away
	for i := range 15 {
		txid := fmt.Sprint("b-during-", i)
		if s := pushTo(t, base, "b-orders", txid); s != "buffered" {
			t.Fatalf("push to s1's queue during its outage: %s", s)
		}
		wantB = append(wantB, txid)
		txid = fmt.Sprint("a-during-", i)
		// Queued; or, on a loaded machine, one push timed out and
		// buffered alone, s0's lane healthy: never sent to disk for
		// s1's outage.
		if s := pushTo(t, base, "a-orders", txid); s != "queued" && (s != "buffered" || !lane0.Healthy()) {
			t.Fatalf("push to s0's queue during s1's outage: %s (s0's lane healthy: %v), want queued", s, lane0.Healthy())
		}
		wantA = append(wantA, txid)
	}
	if s := pushTo(t, base, "b-orders", wantB[0]); s != "buffered" {
		t.Fatalf("retry during the outage: %s", s)
	}
	if n := lane1.Pending(); n != 16 || !lane0.Healthy() || lane1.Healthy() {
		t.Fatalf("during s1's outage: s1's lane %d pending (healthy %v), s0's healthy %v; want 16, s0's lane healthy only",
			n, lane1.Healthy(), lane0.Healthy())
	}

	proxy.SetMode(faults.Pass, 0) // s1 comes back
	waitDrained(t, lane1, nil)
	waitDrained(t, lane0, nil)
	storedOnce(t, sh.s1, "b-orders", wantB)
	storedOnce(t, sh.s0, "a-orders", wantA)
	if n, m := messagesOf(t, sh.s0, "b-orders"), messagesOf(t, sh.s1, "a-orders"); n+m != 0 {
		t.Errorf("b-orders on s0: %d, a-orders on s1: %d; want none", n, m)
	}
}

// TestShardsSpoolDrainRoutesByPlacementAtDrainTime: pushes to a queue on
// s0 buffered in s0's lane while s0 is cut; s0 back, the queue is moved to
// s1 (frozen on s0 at epoch 1, copied, activated on s1 at epoch 2, the
// catalogue's placement compare-and-set) before the lane drains (the
// broker runs no background services: the test runs the drain). The drain
// routes by the placement when it drains: the broker's cached placement
// (s0) answers moved, it routes again, and every buffered message lands
// on s1 exactly once, none on s0, which keeps only what was copied.
func TestShardsSpoolDrainRoutesByPlacementAtDrainTime(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	cfg, proxy := proxiedShards(t, sh, "s0", "")
	b := startQuiet(t, cfg)
	t.Cleanup(func() { shutdown(t, b) })
	base := "http://" + b.Addr()
	lane, drain := b.Lane("s0")
	want := pushUntilQueued(t, base, "m-orders", lane, drain)
	copied := len(want)

	proxy.SetMode(faults.Refuse, 0)
	for i := range 10 {
		txid := fmt.Sprint("during-", i)
		if s := pushTo(t, base, "m-orders", txid); s != "buffered" {
			t.Fatalf("push during s0's outage: %s", s)
		}
		want = append(want, txid)
	}
	proxy.SetMode(faults.Pass, 0)
	newMover(t, sh, cfg).move("m-orders")

	waitDrained(t, lane, drain)
	storedOnce(t, sh.s1, "m-orders", want)
	if n := messagesOf(t, sh.s0, "m-orders"); n != copied {
		t.Errorf("m-orders on s0 after the drain: %d messages, want the %d copied before the move", n, copied)
	}
}

// startQuiet is start with no background services: the test steps them.
func startQuiet(t *testing.T, cfg config.Config) *queen.Broker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := queen.New(queen.Options{Config: cfg, Listener: l, NoBackground: true, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestShardsSpoolLanesAreOneBrokersAndRefuseAnUnlanedSpool: a second
// broker given the same FILE_BUFFER_DIR is refused by the first's lane
// lock, naming the lane; and a FILE_BUFFER_DIR holding spool files of a
// broker without shards (which no lane would replay) is a startup error
// saying so, the file left where it is.
func TestShardsSpoolLanesAreOneBrokersAndRefuseAnUnlanedSpool(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	cfg := sh.config(t, "")
	b := start(t, cfg)
	err := startErr(t, cfg)
	shutdown(t, b)
	if err == nil || !strings.Contains(err.Error(), "shard s0's lane") || !errors.Is(err, spool.ErrLocked) {
		t.Errorf("a second broker on the lanes: %v", err)
	}

	cfg.FileBufferDir = t.TempDir()
	old := filepath.Join(cfg.FileBufferDir, "00000000000000000001.buf")
	if err := os.WriteFile(old, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := startErr(t, cfg); err == nil || !strings.Contains(err.Error(), "spooled without shards") {
		t.Errorf("start on a spool without lanes: %v", err)
	}
	if _, err := os.Stat(old); err != nil {
		t.Errorf("the unlaned spool file: %v", err)
	}
}
