package queen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/pglocal"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/store/storetest"
)

// logicalShard starts a throwaway cluster with wal_level=logical (a move's
// copy is logical replication) and creates databases dbs on it.
func logicalShard(t *testing.T, name string, dbs ...string) *pglocal.Cluster {
	t.Helper()
	c := storetest.Cluster(t, name, pglocal.LogicalSettings...)
	for _, db := range dbs {
		storetest.CreateDatabase(t, c, db)
	}
	return c
}

// moveTraffic pushes to and consumes one queue through several brokers
// while it moves, retrying what answers 503 (the queue is moving), and
// records what it pushed and what it was delivered, per partition.
type moveTraffic struct {
	queue string
	bases []string

	mu        sync.Mutex
	pushed    []string
	delivered map[string]int
	order     map[string][]int // partition -> payload n in delivery order
	refusals  int              // 503s while the queue moved
	buffered  map[int]bool     // payload n of the pushes answered buffered (spooled)
}

// request sends a request and answers its status and body; an error only when
// the broker did not answer.
func request(method, url, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), err
}

// push pushes message n through broker n%len(bases) until it is stored.
func (tr *moveTraffic) push(ctx context.Context, n int) error {
	body := fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p%d","transactionId":"m-%06d","payload":{"n":%d}}]}`, tr.queue, n%4, n, n)
	for try := 0; ctx.Err() == nil; try++ {
		code, answer, err := request("POST", tr.bases[(n+try)%len(tr.bases)]+"/api/v1/push", body)
		switch {
		case err != nil:
			return err
		case code == 201:
			tr.mu.Lock()
			tr.pushed = append(tr.pushed, fmt.Sprintf("m-%06d", n))
			if strings.Contains(answer, `"status":"buffered"`) {
				tr.buffered[n] = true // spooled: ordered at its replay (SPEC, the spool)
			}
			tr.mu.Unlock()
			return nil
		case code != 503:
			return fmt.Errorf("push %d: %d %s", n, code, answer)
		}
		tr.refused()
		time.Sleep(20 * time.Millisecond)
	}
	return ctx.Err()
}

func (tr *moveTraffic) refused() {
	tr.mu.Lock()
	tr.refusals++
	tr.mu.Unlock()
}

// popMessage is what the test reads of a popped message.
type popMessage struct {
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
	LeaseID       string `json:"leaseId"`
	Data          struct {
		N int `json:"n"`
	} `json:"data"`
}

// consume pops a batch through broker i and acks it (through the same
// broker), and answers how many messages it got.
func (tr *moveTraffic) consume(i int) (int, error) {
	base := tr.bases[i%len(tr.bases)]
	code, body, err := request("GET", base+"/api/v1/pop/queue/"+tr.queue+"?batch=5&wait=false", "")
	switch {
	case err != nil:
		return 0, err
	case code == 204:
		return 0, nil
	case code == 503:
		tr.refused()
		return 0, nil
	case code != 200:
		return 0, fmt.Errorf("pop: %d %s", code, body)
	}
	n, acks, err := tr.record(body)
	if err != nil {
		return 0, err
	}
	return n, tr.ack(base, acks)
}

// record notes the messages of a pop's answer body as delivered, in
// their partitions' order, and answers how many there were and the ack
// batch completing them all.
func (tr *moveTraffic) record(body string) (int, string, error) {
	var out struct{ Messages []popMessage }
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		return 0, "", fmt.Errorf("pop: %s: %w", body, err)
	}
	acks := make([]string, len(out.Messages))
	tr.mu.Lock()
	for j, m := range out.Messages {
		tr.delivered[m.TransactionID]++
		tr.order[m.PartitionID] = append(tr.order[m.PartitionID], m.Data.N)
		acks[j] = fmt.Sprintf(`{"partitionId":%q,"transactionId":%q,"leaseId":%q,"status":"completed"}`, m.PartitionID, m.TransactionID, m.LeaseID)
	}
	tr.mu.Unlock()
	return len(out.Messages), `{"acknowledgments":[` + strings.Join(acks, ",") + `]}`, nil
}

// ack acknowledges a batch, again while the queue is moving.
func (tr *moveTraffic) ack(base, body string) error {
	for range 500 {
		code, answer, err := request("POST", base+"/api/v1/ack/batch", body)
		switch {
		case err != nil:
			return err
		case code == 503:
			tr.refused()
			time.Sleep(20 * time.Millisecond)
			continue
		case code != 200 || strings.Contains(answer, `"success":false`):
			return fmt.Errorf("ack: %d %s", code, answer)
		}
		return nil
	}
	return fmt.Errorf("ack: still moving")
}

// check fails unless every pushed message was delivered once, each
// partition in push order.
func (tr *moveTraffic) check(t *testing.T) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, id := range tr.pushed {
		if n := tr.delivered[id]; n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	if len(tr.delivered) != len(tr.pushed) {
		t.Errorf("%d messages delivered, %d pushed", len(tr.delivered), len(tr.pushed))
	}
	for pid, ns := range tr.order {
		last := -1
		for _, n := range ns {
			if tr.buffered[n] {
				continue // a spooled push is ordered at its replay, not its answer
			}
			if n <= last {
				t.Errorf("partition %s delivered %d after %d", pid, n, last)
				break
			}
			last = n
		}
	}
}

// TestShardsMoveAQueueOverHTTP moves a queue from shard s0 to shard s1
// (two clusters) through the admin route while a producer and a consumer
// work on it through two brokers with no mesh between them: the one that
// did not run the move keeps its stale placement until the fence tells it
// otherwise. Every pushed message is delivered exactly once, in order per
// partition, and none is left on s0, where only the queue's tombstone
// stays; the routes refuse bad input with 4xx and nothing planned. It
// fails with the tombstone deleted by the cleanup (the stale broker's
// pushes recreate the queue on s0, and are never delivered).
func TestShardsMoveAQueueOverHTTP(t *testing.T) {
	t.Parallel()
	ca, cb := logicalShard(t, "a", "cat", "s0"), logicalShard(t, "b", "s1")
	cfg := testConfig(t, ca.DSN("s0"))
	var err error
	cfg.Shards, err = shards.Parse(pgURL(t, ca.DSN("cat")), "s0="+pgURL(t, ca.DSN("s0"))+";s1="+pgURL(t, cb.DSN("s1")), "")
	if err != nil {
		t.Fatal(err)
	}
	b1 := start(t, cfg)
	cfg.FileBufferDir = t.TempDir() // each broker's spool lanes its own
	b2 := start(t, cfg)
	defer shutdown(t, b1)
	defer shutdown(t, b2)
	tr := &moveTraffic{queue: "mv", bases: []string{"http://" + b1.Addr(), "http://" + b2.Addr()},
		delivered: map[string]int{}, order: map[string][]int{}, buffered: map[int]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for n := range 40 { // both brokers cache the placement on s0
		if err := tr.push(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	checkMoveRefusals(t, tr.bases[0])
	stale := tr.bases[1]
	tr.bases = tr.bases[:1] // b2 stays out of the move: its cache keeps s0

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	produced := make(chan struct{}) // the producer's last push answered
	go func() {                     // the producer
		defer wg.Done()
		defer close(produced)
		for n := 40; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := tr.push(ctx, n); err != nil {
				errs <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	go func() { // the consumer, until the producer stopped and all is delivered
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			got, err := tr.consume(i)
			if err != nil {
				errs <- err
				return
			}
			select {
			case <-produced: // a push still in flight at stop counts too
				if got == 0 && tr.drained() {
					return
				}
			default:
			}
			if got == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()

	code, body := post(t, tr.bases[0]+"/api/v1/admin/queues/mv/move", `{"to":"s1"}`)
	var started struct{ MoveID, State string }
	if err := json.Unmarshal([]byte(body), &started); code != 202 || err != nil || started.State != "plan" {
		t.Fatalf("move: %d %s", code, body)
	}
	st := waitMove(t, stale, started.MoveID) // any broker answers for it
	time.Sleep(200 * time.Millisecond)       // pushes after the move
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The stale broker, after the cleanup: its pushes and pops meet the
	// tombstone's fence and go to s1.
	tr.bases = []string{stale}
	next := len(tr.pushed) + 40
	for n := next; n < next+20; n++ {
		if err := tr.push(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; !tr.drained() && ctx.Err() == nil; i++ {
		if _, err := tr.consume(i); err != nil {
			t.Fatal(err)
		}
	}
	tr.check(t)
	if st.State != "done" || st.Epoch != 2 || st.RowsCopied == 0 {
		t.Errorf("move %+v, want done at epoch 2", st)
	}
	if n := messagesOf(t, ca.DSN("s0"), "mv"); n != 0 {
		t.Errorf("s0 keeps %d messages of the moved queue", n)
	}
	code, body = get(t, stale+"/api/v1/admin/placements")
	if code != 200 || !strings.Contains(body, `{"queue":"mv","shard":"s1","epoch":2,`) ||
		!strings.Contains(body, `{"name":"s1","queues":1,"draining":false}`) {
		t.Errorf("placements: %d %s", code, body)
	}
	t.Logf("%d pushed, %d refusals while moving; copy %d ms, freeze pause %d ms", len(tr.pushed), tr.refusals, st.CopyMs, st.FreezePauseMs)
}

// drained reports whether every pushed message was delivered.
func (tr *moveTraffic) drained() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.delivered) >= len(tr.pushed)
}

// moveState is GET /api/v1/admin/moves/{id}'s answer as the test reads it.
type moveState struct {
	MoveID, Queue, From, To, State, Reason   string
	Epoch, RowsCopied, CopyMs, FreezePauseMs int64
}

// waitMove polls a move until it is done or failed.
func waitMove(t *testing.T, base, id string) moveState {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		code, body := get(t, base+"/api/v1/admin/moves/"+id)
		var st moveState
		if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
			t.Fatalf("move %s: %d %s", id, code, body)
		}
		if st.State == "done" || st.State == "failed" {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("move %s did not finish", id)
	return moveState{}
}

// checkMoveRefusals: the move routes answer bad input with a 4xx naming
// what is wrong, and plan nothing.
func checkMoveRefusals(t *testing.T, base string) {
	t.Helper()
	for _, c := range []struct {
		path, body string
		code       int
		says       string
	}{
		{"/api/v1/admin/queues/mv/move", `{}`, 400, "to (the destination shard's name) is required"},
		{"/api/v1/admin/queues/mv/move", `{"to":7}`, 400, "to must be a string"},
		{"/api/v1/admin/queues/mv/move", `{"to":"s9"}`, 400, "unknown shard"},
		{"/api/v1/admin/queues/mv/move", `{"to":"s0"}`, 400, "on that shard already"},
		{"/api/v1/admin/queues/nosuch/move", `{"to":"s1"}`, 404, "unknown queue"},
		{"/api/v1/admin/queues/mv/move", `not json`, 400, ""},
	} {
		if code, body := post(t, base+c.path, c.body); code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("POST %s %s: %d %s, want %d saying %q", c.path, c.body, code, body, c.code, c.says)
		}
	}
	for path, want := range map[string]int{
		"/api/v1/admin/moves/not-a-uuid":                           400,
		"/api/v1/admin/moves/00000000-0000-0000-0000-000000000001": 404,
		"/api/v1/admin/placements?limit=0":                         400,
		"/api/v1/admin/placements?limit=x":                         400,
	} {
		if code, body := get(t, base+path); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, body, want)
		}
	}
}
