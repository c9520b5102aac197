package queen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/store"
)

// TestShardsListAcrossShards: with queues on two shards (a-* on s0, b-*
// on s1, created interleaved), the read routes fan out to every shard and
// merge: the queue lists hold both shards' queues newest first, and every
// page of them (limit, offset) is the page of the whole list; a queue also
// found on the other shard (a tombstone left by a move, written here by
// hand) is listed once, from the shard its placement names; the overview,
// namespaces, tasks and status sum both shards; a queue's status and
// messages come from its shard; a consumer group consuming queues on both
// shards shows both; /metrics sums the pools and the scrape has each
// queue's depth and a pool series per shard. A shard that cannot be read
// fails a list with 503 naming it.
func TestShardsListAcrossShards(t *testing.T) {
	t.Parallel()
	sh := newSharded(t)
	cfg := sh.config(t, "queue:b-*=s1")
	b := start(t, cfg)
	base := "http://" + b.Addr()
	for _, q := range []struct{ name, ns, task string }{
		{"a-1", "n1", "t1"}, {"b-1", "n1", "t2"}, {"a-2", "n2", "t1"}, {"b-2", "", ""}, {"b-3", "n2", "t2"},
	} {
		body := fmt.Sprintf(`{"queue":%q,"namespace":%q,"task":%q}`, q.name, q.ns, q.task)
		if code, out := post(t, base+"/api/v1/configure", body); code != 200 {
			t.Fatalf("configure %s: %d %s", q.name, code, out)
		}
	}
	for q, n := range map[string]int{"a-1": 2, "b-1": 3, "b-3": 1} {
		for i := range n {
			if code, out := post(t, base+"/api/v1/push", fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p","payload":{"n":%d}}]}`, q, i)); code != 201 {
				t.Fatalf("push %s: %d %s", q, code, out)
			}
		}
	}
	pushed := time.Now()
	if got := queuesOn(t, sh.s0); !slices.Equal(got, []string{"a-1", "a-2"}) {
		t.Fatalf("queues on s0: %v", got)
	}
	// A tombstone of b-1 on s0 (a move's source keeps its frozen queue
	// row): the same id and creation time, another namespace.
	ghost(t, sh.s1, sh.s0, "b-1")

	newest := []string{"b-3", "b-2", "a-2", "b-1", "a-1"}
	checkQueuePages(t, base, newest)
	if got := queueNames(t, base+"/api/v1/resources/queues?namespace=n1", "queues"); !slices.Equal(got, []string{"b-1", "a-1"}) {
		t.Errorf("queues of n1: %v, want [b-1 a-1]", got)
	}

	refreshQueueStats(t, sh.s0, sh.s1)
	checkSums(t, base)
	checkQueueStatus(t, base)
	checkGroups(t, base, pushed)
	checkMetrics(t, base, 2*cfg.DBPoolSize)

	// s1 refuses connections: every fan-out fails naming it.
	restore := refuseConnections(t, sh.catalog, sh.s1)
	for _, route := range []string{"/api/v1/resources/queues", "/api/v1/resources/overview", "/api/v1/status",
		"/api/v1/resources/namespaces", "/api/v1/consumer-groups", "/api/v1/consumer-groups/g1"} {
		if code, body := get(t, base+route); code != 503 || !strings.Contains(body, `"shard":"s1"`) || !strings.Contains(body, "shard s1 unavailable") {
			t.Errorf("%s with s1 down: %d %s", route, code, body)
		}
	}
	restore()
	shutdown(t, b)
}

// checkQueuePages checks both queue lists, whole and in every page of
// one to six queues at offsets zero to six, against newest.
func checkQueuePages(t *testing.T, base string, newest []string) {
	t.Helper()
	if got := queueNames(t, base+"/api/v1/resources/queues", "queues"); !slices.Equal(got, newest) {
		t.Errorf("queue list: %v, want %v", got, newest)
	}
	if got := queueNames(t, base+"/api/v1/status/queues", "queues"); !slices.Equal(got, newest) {
		t.Errorf("status queue list: %v, want %v", got, newest)
	}
	// A page's queues are counted on their shards.
	var page struct {
		Queues []struct {
			Name       string
			Partitions int
			Messages   struct{ Total int64 }
		}
	}
	getJSON(t, base+"/api/v1/resources/queues?limit=2&offset=3", &page)
	if got := fmt.Sprint(page.Queues); got != "[{b-1 2 {3}} {a-1 2 {2}}]" {
		t.Errorf("page at offset 3: %s, want [{b-1 2 {3}} {a-1 2 {2}}]", got)
	}
	for offset := range 7 {
		for limit := 1; limit <= 6; limit++ {
			want := newest[min(offset, len(newest)):min(offset+limit, len(newest))]
			q := fmt.Sprintf("?limit=%d&offset=%d", limit, offset)
			if got := queueNames(t, base+"/api/v1/resources/queues"+q, "queues"); !slices.Equal(got, want) {
				t.Errorf("queue list %s: %v, want %v", q, got, want)
			}
			if got := queueNames(t, base+"/api/v1/status/queues"+q, "queues"); !slices.Equal(got, want) {
				t.Errorf("status queue list %s: %v, want %v", q, got, want)
			}
		}
	}
}

// checkSums checks the overview, namespaces, tasks and status: both
// shards' queues counted once each (the tombstone not at all).
func checkSums(t *testing.T, base string) {
	t.Helper()
	var ov struct {
		Queues         int64    `json:"queues"`
		Partitions     int64    `json:"partitions"`
		NamespaceNames []string `json:"namespaceNames"`
		TaskNames      []string `json:"taskNames"`
		Messages       struct {
			Total, Pending int64
		} `json:"messages"`
	}
	getJSON(t, base+"/api/v1/resources/overview", &ov)
	if ov.Queues != 5 || ov.Partitions != 8 || ov.Messages.Total != 6 || ov.Messages.Pending != 6 ||
		!slices.Equal(ov.NamespaceNames, []string{"n1", "n2"}) || !slices.Equal(ov.TaskNames, []string{"t1", "t2"}) {
		t.Errorf("overview: %+v", ov)
	}
	var ns struct {
		Namespaces []struct {
			Namespace string `json:"namespace"`
			Queues    int    `json:"queues"`
			Messages  struct{ Total int64 }
		} `json:"namespaces"`
	}
	getJSON(t, base+"/api/v1/resources/namespaces", &ns)
	if got := fmt.Sprint(ns.Namespaces); got != "[{n1 2 {5}} {n2 2 {1}}]" {
		t.Errorf("namespaces: %s, want [{n1 2 {5}} {n2 2 {1}}]", got)
	}
	var ts struct {
		Tasks []struct {
			Task     string `json:"task"`
			Queues   int    `json:"queues"`
			Messages struct{ Total int64 }
		} `json:"tasks"`
	}
	getJSON(t, base+"/api/v1/resources/tasks", &ts)
	if got := fmt.Sprint(ts.Tasks); got != "[{t1 2 {2}} {t2 2 {4}}]" {
		t.Errorf("tasks: %s, want [{t1 2 {2}} {t2 2 {4}}]", got)
	}
	var st struct {
		Queues   []struct{ Name string }
		Messages struct{ Total, Pending int64 }
	}
	getJSON(t, base+"/api/v1/status", &st)
	if got := fmt.Sprint(st.Queues); st.Messages.Total != 6 || st.Messages.Pending != 6 || got != "[{b-3} {b-1} {a-1}]" {
		t.Errorf("status: queues %s, messages %+v; want [{b-3} {b-1} {a-1}], 6 and 6", got, st.Messages)
	}
}

// checkQueueStatus checks that a queue's status and messages are its
// shard's.
func checkQueueStatus(t *testing.T, base string) {
	t.Helper()
	for q, n := range map[string]int64{"a-1": 2, "b-1": 3} {
		var st struct {
			Name   string
			Queue  struct{ Namespace *string }
			Totals struct{ Messages struct{ Total int64 } }
		}
		getJSON(t, base+"/api/v1/status/queues/"+q, &st)
		if st.Name != q || st.Totals.Messages.Total != n || st.Queue.Namespace == nil || *st.Queue.Namespace != "n1" {
			t.Errorf("status of %s: %+v, want %d messages in n1", q, st, n)
		}
		var ms struct{ Messages []json.RawMessage }
		getJSON(t, base+"/api/v1/status/queues/"+q+"/messages", &ms)
		if int64(len(ms.Messages)) != n {
			t.Errorf("messages of %s: %d, want %d", q, len(ms.Messages), n)
		}
	}
}

// checkGroups pops a-1 and b-1 (one shard each) as group g1 and checks
// the group routes show both queues.
func checkGroups(t *testing.T, base string, pushed time.Time) {
	t.Helper()
	for _, q := range []string{"a-1", "b-1"} {
		if code, body := get(t, base+"/api/v1/pop/queue/"+q+"?consumerGroup=g1&batch=1&wait=false"); code != 200 {
			t.Fatalf("pop %s as g1: %d %s", q, code, body)
		}
	}
	var list []struct {
		Name, QueueName string
		LagMessages     int64
	}
	getJSON(t, base+"/api/v1/consumer-groups", &list)
	if got := fmt.Sprint(list); got != "[{g1 a-1 2} {g1 b-1 3}]" {
		t.Errorf("consumer groups: %s, want [{g1 a-1 2} {g1 b-1 3}]", got)
	}
	var one map[string]struct{ Partitions []struct{ Partition string } }
	getJSON(t, base+"/api/v1/consumer-groups/g1", &one)
	if got := fmt.Sprint(one); got != "map[a-1:{[{Default} {p}]} b-1:{[{Default} {p}]}]" {
		t.Errorf("consumer group g1: %+v, want a-1 and b-1", one)
	}
	// A cursor lags once its oldest unconsumed message is over a second
	// old (lag is counted in whole seconds).
	time.Sleep(time.Until(pushed.Add(1500 * time.Millisecond)))
	var lagging []struct {
		ConsumerGroup string `json:"consumer_group"`
		QueueName     string `json:"queue_name"`
	}
	getJSON(t, base+"/api/v1/consumer-groups/lagging?minLagSeconds=0", &lagging)
	var queues []string
	for _, l := range lagging {
		queues = append(queues, l.ConsumerGroup+"/"+l.QueueName)
	}
	slices.Sort(queues)
	if !slices.Equal(queues, []string{"g1/a-1", "g1/b-1"}) {
		t.Errorf("lagging: %v, want [g1/a-1 g1/b-1]", queues)
	}
}

// checkMetrics checks /metrics' pool (both shards') and the scrape's
// depths (each queue's from its shard) and pool series per shard.
func checkMetrics(t *testing.T, base string, pool int) {
	t.Helper()
	var m struct{ Database struct{ PoolSize int } }
	getJSON(t, base+"/metrics", &m)
	if m.Database.PoolSize != pool {
		t.Errorf("/metrics poolSize %d, want %d", m.Database.PoolSize, pool)
	}
	code, body := get(t, base+"/metrics/prometheus")
	if code != 200 {
		t.Fatalf("scrape: %d", code)
	}
	var depths, pools []string
	for _, line := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(line, "queen_queue_depth{"):
			depths = append(depths, line[strings.Index(line, `queue="`):strings.Index(line, `",tenant`)]+line[strings.LastIndex(line, " "):])
		case strings.HasPrefix(line, "queen_db_pool_size"):
			pools = append(pools, line)
		}
	}
	want := []string{`queue="a-1 2`, `queue="a-2 0`, `queue="b-1 3`, `queue="b-2 0`, `queue="b-3 1`}
	if !slices.Equal(depths, want) {
		t.Errorf("queue depths %q, want %q", depths, want)
	}
	half := pool / 2
	if wantPools := []string{fmt.Sprintf(`queen_db_pool_size{shard="s0"} %d`, half), fmt.Sprintf(`queen_db_pool_size{shard="s1"} %d`, half)}; !slices.Equal(pools, wantPools) {
		t.Errorf("pool series %q, want %q", pools, wantPools)
	}
}

// queueNames are the names of the queues field of url's answer.
func queueNames(t *testing.T, url, field string) []string {
	t.Helper()
	var out map[string]json.RawMessage
	getJSON(t, url, &out)
	var qs []struct{ Name string }
	if err := json.Unmarshal(out[field], &qs); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	names := []string{}
	for _, q := range qs {
		names = append(names, q.Name)
	}
	return names
}

// getJSON gets url, which must answer 200, into out.
func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	code, body := get(t, url)
	if code != 200 {
		t.Fatalf("%s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), out); err != nil {
		t.Fatalf("%s: %v in %s", url, err, body)
	}
}

// ghost writes on to's database a frozen copy of from's queue (its id,
// tenant and creation time) in namespace ghost: what a move leaves on its
// source.
func ghost(t *testing.T, from, to, queue string) {
	t.Helper()
	ctx := context.Background()
	src := dbConn(t, from)
	defer src.Close(ctx)
	var id, tenant string
	var created time.Time
	if err := src.QueryRow(ctx, `SELECT id::text, tenant_id::text, created_at FROM queen.queues WHERE name = $1`, queue).Scan(&id, &tenant, &created); err != nil {
		t.Fatal(err)
	}
	dst := dbConn(t, to)
	defer dst.Close(ctx)
	if _, err := dst.Exec(ctx, `INSERT INTO queen.queues (id, tenant_id, name, namespace, created_at, epoch) VALUES ($1, $2, $3, 'ghost', $4, -1)`,
		id, tenant, queue, created); err != nil {
		t.Fatal(err)
	}
}

// refreshQueueStats counts every queue of each database into the
// snapshot status and the scrape read (the leader does it every
// STATS_INTERVAL_MS; here at once, so nothing waits on it).
func refreshQueueStats(t *testing.T, dsns ...string) {
	t.Helper()
	ctx := context.Background()
	for _, dsn := range dsns {
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.New(pool, store.Options{}).RefreshQueueStats(ctx); err != nil {
			t.Fatal(err)
		}
		pool.Close()
	}
}
