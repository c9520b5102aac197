package queen_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A deployment that turns shards on keeps its database as a shard: a queue
// it created before has no placement, and its first push after must place
// it where its rows are, not where the rules put new queues (which would
// create it empty there and leave its messages where no request goes).
func TestShardsAdoptAQueueCreatedBeforeShards(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	old := start(t, testConfig(t, sh.s0)) // no shards: s0 is its database
	push := func(base, queue string, n int) {
		t.Helper()
		body := fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p1","payload":{"n":%d}}]}`, queue, n)
		if code, answer := post(t, base+"/api/v1/push", body); code != 201 {
			t.Fatalf("push %s %d: %d %s", queue, n, code, answer)
		}
	}
	for n := range 5 {
		push("http://"+old.Addr(), "legacy", n)
	}
	shutdown(t, old)

	b := start(t, sh.config(t, "queue:*=s1")) // every new queue goes to s1
	base := "http://" + b.Addr()
	push(base, "legacy", 5)
	push(base, "fresh", 0)
	if n, m := messagesOf(t, sh.s0, "legacy"), messagesOf(t, sh.s1, "legacy"); n != 6 || m != 0 {
		t.Fatalf("legacy: %d messages on s0, %d on s1; want 6 and 0 (adopted where it was)", n, m)
	}
	if got := queuesOn(t, sh.s1); !slices.Equal(got, []string{"fresh"}) {
		t.Errorf("queues on s1: %v, want [fresh] (a new queue follows the rules)", got)
	}
	if n := count(t, sh.catalog, `SELECT count(*) FROM queen_catalog.placements WHERE queue = 'legacy' AND shard = 's0'`); n != 1 {
		t.Errorf("catalogue: legacy placed on s0 %d times, want 1", n)
	}
	code, body := get(t, base+"/api/v1/pop/queue/legacy?batch=10&wait=false")
	if code != 200 || strings.Count(body, `"transactionId"`) != 6 {
		t.Errorf("pop legacy: %d %s, want its 6 messages", code, body)
	}
	shutdown(t, b)
}

// A request for a queue with no placement carries the epoch its rows were
// born at, not "no check": a broker that looked it up before a push placed
// it and a move froze it meets the fence on the frozen rows.
func TestShardsUnplacedQueueMeetsTheFence(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	old := start(t, testConfig(t, sh.s0))
	if code, body := post(t, "http://"+old.Addr()+"/api/v1/push", `{"items":[{"queue":"legacy","payload":1}]}`); code != 201 {
		t.Fatalf("push: %d %s", code, body)
	}
	shutdown(t, old)
	setEpoch(t, sh.s0, "legacy", -1) // frozen, as a move's freeze leaves it

	b := start(t, sh.config(t, ""))
	code, body := get(t, "http://"+b.Addr()+"/api/v1/pop/queue/legacy?batch=10&wait=false")
	if code != 503 || !strings.Contains(body, "moving") {
		t.Errorf("pop of the unplaced, frozen queue: %d %s; want 503 queue is moving", code, body)
	}
	shutdown(t, b)
}
