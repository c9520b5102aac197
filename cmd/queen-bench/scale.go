package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/leader"
	"github.com/queen-go/queen/queen/store"
)

// The scale mode (make bench-scale) measures each operation at a small
// size, grows the tables untimed with SQL into the broker's own tables (as
// the broker would have written them), and measures again: the report is
// each operation's p50 and p99 at both sizes and large/small. Per-request
// operations should stay within 1.5; a retention pass should follow the
// rows it deletes, not the size of the table.

// scaleSize is how far the tables grow.
type scaleSize struct {
	Queues, Partitions, Messages, DLQ, KV int
}

// scaleOp is one operation timed at both sizes.
type scaleOp struct {
	Name                         string
	SmallP50, SmallP99, LargeP50 float64 // milliseconds
	LargeP99, Ratio              float64
	SmallRows, LargeRows         int64 `json:",omitempty"` // retention: rows deleted
	small, large                 []float64
	run                          func(ctx context.Context, i int) (rows int64, err error)
	samples                      int
	cold                         bool // no warm-up runs (they would do the work measured)
}

type scaleResult struct {
	Size scaleSize
	Grow float64 // seconds spent growing the tables
	Ops  []scaleOp
}

// scaleQueues are the queues the timed operations use; the grown ones are
// scale-g-N.
const (
	hotQueue    = "scale-hot"    // pushes, pops, acks, depth
	emptyQueue  = "scale-empty"  // every partition consumed: empty wildcard pops
	behindQueue = "scale-behind" // a group far behind
	dlqQueue    = "scale-dlq"
	kvNS        = "scale"
)

func (e *env) scale(ctx context.Context, size scaleSize) (scaleResult, error) {
	res := scaleResult{Size: size}
	st := store.New(e.pool, store.Options{IDs: ids.NewSource(clock.Real{}, nil)})
	if err := e.scaleSetup(ctx); err != nil {
		return res, err
	}
	ops := e.scaleOps(st)
	if err := e.awaitQueueStats(ctx, time.Now()); err != nil {
		return res, err
	}
	if err := e.scaleMeasure(ctx, ops, false); err != nil {
		return res, err
	}
	start := time.Now()
	if err := e.grow(ctx, size); err != nil {
		return res, fmt.Errorf("grow: %w", err)
	}
	res.Grow = time.Since(start).Seconds()
	fmt.Printf("grown in %.0fs: %+v\n", res.Grow, size)
	if err := e.awaitQueueStats(ctx, time.Now()); err != nil {
		return res, err
	}
	if err := e.scaleMeasure(ctx, ops, true); err != nil {
		return res, err
	}
	for _, op := range ops {
		op.SmallP50, op.SmallP99 = median(op.small), percentile(op.small, 0.99)
		op.LargeP50, op.LargeP99 = median(op.large), percentile(op.large, 0.99)
		if op.SmallP50 > 0 {
			op.Ratio = op.LargeP50 / op.SmallP50
		}
		res.Ops = append(res.Ops, *op)
	}
	return res, nil
}

// scaleSetup makes the timed queues: the hot one with a backlog, one whose
// partitions are all consumed, one with a group far behind.
func (e *env) scaleSetup(ctx context.Context) error {
	for _, q := range []string{hotQueue, emptyQueue, behindQueue, dlqQueue} {
		if code, body, err := e.http.do(ctx, "POST", e.url+"/api/v1/configure", []byte(fmt.Sprintf(`{"queue":%q,"options":{"leaseTime":30}}`, q))); err != nil || code != 200 {
			return fmt.Errorf("configure %s: %d %s %v", q, code, body, err)
		}
	}
	for i := 0; i < 20; i++ {
		if err := e.pushN(ctx, hotQueue, fmt.Sprintf("p%d", i%10), 100); err != nil {
			return err
		}
	}
	if err := e.pushN(ctx, behindQueue, "p0", 200); err != nil {
		return err
	}
	for i := 0; i < 10; i++ {
		if err := e.pushN(ctx, emptyQueue, fmt.Sprintf("p%d", i), 1); err != nil {
			return err
		}
	}
	for {
		code, _, err := e.http.do(ctx, "GET", e.url+"/api/v1/pop/queue/"+emptyQueue+"?batch=100&autoAck=true", nil)
		if err != nil {
			return err
		}
		if code == 204 {
			break
		}
	}
	_, _, err := e.http.do(ctx, "POST", e.url+"/api/v1/kv", []byte(fmt.Sprintf(`{"operations":[{"op":"put","ns":%q,"key":"small-1","value":1,"forever":true}]}`, kvNS)))
	return err
}

// pushN pushes n messages to one partition in one request.
func (e *env) pushN(ctx context.Context, queue, partition string, n int) error {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"queue":%q,"partition":%q,"payload":{"n":%d}}`, queue, partition, i)
	}
	code, body, err := e.http.do(ctx, "POST", e.url+"/api/v1/push", []byte(`{"items":[`+strings.Join(items, ",")+`]}`))
	if err != nil || code != 201 {
		return fmt.Errorf("push %s: %d %s %v", queue, code, body, err)
	}
	return nil
}

// scaleOps are the timed operations.
func (e *env) scaleOps(st *store.Store) []*scaleOp {
	get := func(path string, want ...int) func(ctx context.Context, i int) (int64, error) {
		return func(ctx context.Context, i int) (int64, error) {
			url := e.url + path
			if strings.Contains(path, "%d") {
				url = e.url + fmt.Sprintf(path, i)
			}
			code, body, err := e.http.do(ctx, "GET", url, nil)
			if err == nil && !wanted(code, want) {
				err = fmt.Errorf("%s: %d %.100s", path, code, body)
			}
			return 0, err
		}
	}
	ok := []int{200, 204}
	return []*scaleOp{
		{Name: "push", samples: 200, run: func(ctx context.Context, i int) (int64, error) {
			return 0, e.pushN(ctx, hotQueue, fmt.Sprintf("p%d", i%10), 1)
		}},
		{Name: "pop one partition", samples: 100, run: get("/api/v1/pop/queue/"+hotQueue+"/partition/p%d?batch=1&autoAck=true", ok...)},
		{Name: "pop wildcard", samples: 100, run: get("/api/v1/pop/queue/"+hotQueue+"?batch=1&autoAck=true&_=%d", ok...)},
		{Name: "pop wildcard, empty", samples: 100, run: get("/api/v1/pop/queue/"+emptyQueue+"?batch=1&_=%d", 204)},
		{Name: "pop group far behind", samples: 100, run: get("/api/v1/pop/queue/"+behindQueue+"?consumerGroup=behind&batch=1&autoAck=true&_=%d", ok...)},
		{Name: "ack", samples: 100, run: e.timedAck},
		{Name: "depth", samples: 100, run: get("/api/v1/resources/queues/"+hotQueue+"/depth?_=%d", 200)},
		{Name: "queue list", samples: 20, run: get("/api/v1/resources/queues?limit=100&_=%d", 200)},
		{Name: "status", samples: 20, run: get("/api/v1/status?_=%d", 200)},
		{Name: "DLQ list", samples: 50, run: get("/api/v1/dlq?queue="+dlqQueue+"&limit=10&_=%d", 200)},
		{Name: "messages list", samples: 50, run: get("/api/v1/messages?queue="+hotQueue+"&limit=10&_=%d", 200)},
		{Name: "KV get", samples: 100, run: get("/api/v1/kv/"+kvNS+"/small-1", 200)},
		{Name: "KV getPrefix", samples: 100, run: func(ctx context.Context, i int) (int64, error) {
			code, body, err := e.http.do(ctx, "POST", e.url+"/api/v1/kv",
				[]byte(fmt.Sprintf(`{"operations":[{"op":"getPrefix","ns":%q,"key":"small","prefix":"small","limit":10}]}`, kvNS)))
			if err == nil && code != 200 {
				err = fmt.Errorf("getPrefix: %d %s", code, body)
			}
			return 0, err
		}},
		{Name: "prometheus scrape", samples: 10, run: get("/metrics/prometheus?_=%d", 200)},
		{Name: "queue stats refresh", samples: 3, run: func(ctx context.Context, i int) (int64, error) {
			// As the broker's leader runs it, under its lock: a pass
			// beside the leader's would wait on its rows.
			var lead *store.Leader
			for lead == nil {
				l, ok, err := st.TryLeader(ctx, store.QueueStatsLock)
				if err != nil {
					return 0, err
				}
				if ok {
					lead = l
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			defer lead.Release()
			start := time.Now()
			_, err := lead.RefreshQueueStats(ctx)
			return -time.Since(start).Microseconds(), err
		}},
		{Name: "retention pass", samples: 3, cold: true, run: func(ctx context.Context, i int) (int64, error) {
			r, err := leader.RetentionPass(ctx, st, st.Pool(), 1000)
			return r.Expired + r.Completed + r.Evicted, err
		}},
	}
}

// timedAck pops one message under a lease (untimed) and times its ack.
func (e *env) timedAck(ctx context.Context, i int) (int64, error) {
	code, body, err := e.http.do(ctx, "GET", e.url+"/api/v1/pop/queue/"+hotQueue+"?batch=1", nil)
	if err != nil || code == 204 {
		return 0, err
	}
	var p popped
	if json.Unmarshal(body, &p) != nil || len(p.Messages) == 0 {
		return 0, fmt.Errorf("pop for ack: %d %s", code, body)
	}
	m := p.Messages[0]
	start := time.Now()
	code, body, err = e.http.do(ctx, "POST", e.url+"/api/v1/ack", []byte(fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`,
		m.TransactionID, m.PartitionID, p.LeaseID)))
	if err == nil && code != 200 {
		err = fmt.Errorf("ack: %d %s", code, body)
	}
	return -time.Since(start).Microseconds(), err // negative: the ack's own time, in µs
}

// scaleMeasure runs every op's samples (after two untimed warm-ups) and
// records them at the small or the large size.
func (e *env) scaleMeasure(ctx context.Context, ops []*scaleOp, large bool) error {
	for _, op := range ops {
		first := -2
		if op.cold {
			first = 0
		}
		for i := first; i < op.samples; i++ {
			start := time.Now()
			rows, err := op.run(ctx, i+2)
			ms := float64(time.Since(start).Microseconds()) / 1000
			if rows < 0 { // the op timed itself
				ms, rows = float64(-rows)/1000, 0
			}
			if err != nil {
				return fmt.Errorf("%s: %w", op.Name, err)
			}
			if i < 0 {
				continue
			}
			if large {
				op.large, op.LargeRows = append(op.large, ms), op.LargeRows+rows
			} else {
				op.small, op.SmallRows = append(op.small, ms), op.SmallRows+rows
			}
		}
	}
	return nil
}

// awaitQueueStats waits until the broker's queue-statistics leader has
// counted every queue since the tables reached their size, so status and
// the scrape are timed on a snapshot of those tables, not an empty one.
func (e *env) awaitQueueStats(ctx context.Context, since time.Time) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		code, body, err := e.http.do(ctx, "GET", e.url+"/api/v1/status", nil)
		if err != nil {
			return err
		}
		var st struct {
			QueueStatsAge float64 `json:"queueStatsAge"`
		}
		if code == 200 && json.Unmarshal(body, &st) == nil && st.QueueStatsAge >= 0 &&
			time.Now().Add(-time.Duration(st.QueueStatsAge*float64(time.Second))).After(since) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the queue statistics were not refreshed within 5 minutes: %d %.200s", code, body)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func wanted(code int, want []int) bool {
	for _, w := range want {
		if code == w {
			return true
		}
	}
	return false
}

// grow fills the broker's tables with SQL: size.Queues queues (a tenth
// with retention on, some of their rows due), size.Partitions partitions
// over them with size.Messages messages, every partition of emptyQueue's
// kind consumed, size.DLQ dead letters in dlqQueue, size.KV KV keys, and a
// group far behind on behindQueue.
func (e *env) grow(ctx context.Context, size scaleSize) error {
	perQueue := max(size.Partitions/max(size.Queues, 1), 1)
	perPartition := max(size.Messages/max(size.Partitions, 1), 1)
	steps := []struct {
		what string
		sql  string
		args []any
	}{
		{"queues", `INSERT INTO queen.queues (id, name, retention_enabled, retention_seconds)
			SELECT gen_random_uuid(), 'scale-g-' || i, i % 10 = 0, CASE WHEN i % 10 = 0 THEN 3600 ELSE 0 END
			FROM generate_series(1, $1) i`, []any{size.Queues}},
		{"partitions", `INSERT INTO queen.partitions (id, queue_id, name, last_seq, appended, last_message_at)
			SELECT gen_random_uuid(), q.id, 'p' || j, $2, $2, now() FROM queen.queues q, generate_series(1, $1) j
			WHERE q.name LIKE 'scale-g-%'`, []any{perQueue, perPartition}},
		{"messages", `INSERT INTO queen.messages (id, partition_id, seq, transaction_id, payload, created_at)
			SELECT gen_random_uuid(), p.id, s, 'g' || s, '{"n":1}',
				CASE WHEN s = 1 AND q.retention_enabled THEN now() - interval '2 hours' ELSE now() - make_interval(secs => ($1 - s)::float8) END
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id, generate_series(1, $1) s
			WHERE q.name LIKE 'scale-g-%'`, []any{perPartition}},
		{"cursors", `INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group, last_consumed_seq)
			SELECT p.id, p.queue_id, '__QUEUE_MODE__', p.last_seq FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.name LIKE 'scale-g-%' ON CONFLICT DO NOTHING`, nil},
		{"consumed partitions of " + emptyQueue, `WITH q AS (SELECT id FROM queen.queues WHERE name = $2),
			p AS (INSERT INTO queen.partitions (id, queue_id, name, last_seq) SELECT gen_random_uuid(), q.id, 'g' || i, 1
				FROM q, generate_series(1, $1) i RETURNING id, queue_id)
			INSERT INTO queen.partition_consumers (partition_id, queue_id, consumer_group, last_consumed_seq)
			SELECT id, queue_id, '__QUEUE_MODE__', 1 FROM p`, []any{min(size.Partitions/20, 5000), emptyQueue}},
		{"dead letters", `WITH q AS (SELECT id FROM queen.queues WHERE name = $2),
			p AS (INSERT INTO queen.partitions (id, queue_id, name, last_seq, appended) SELECT gen_random_uuid(), q.id, 'd' || i, 10000, 10000
				FROM q, generate_series(1, greatest($1 / 10000, 1)) i RETURNING id),
			m AS (INSERT INTO queen.messages (id, partition_id, seq, transaction_id, payload, created_at)
				SELECT gen_random_uuid(), p.id, s, 'd' || s, '{}', now() FROM p, generate_series(1, 10000) s RETURNING id, partition_id)
			INSERT INTO queen.dead_letter_queue (message_id, partition_id, consumer_group, failed_at)
			SELECT id, partition_id, '__QUEUE_MODE__', now() FROM m`, []any{size.DLQ, dlqQueue}},
		{"kv", `INSERT INTO queen.kv (tenant_id, namespace, key, value)
			SELECT '00000000-0000-0000-0000-000000000001', $2, 'k' || lpad(i::text, 8, '0'), '1' FROM generate_series(1, $1) i`, []any{size.KV, kvNS}},
		{"a group far behind", `WITH p AS (SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
				WHERE q.name = $2 AND p.name = 'p0')
			INSERT INTO queen.messages (id, partition_id, seq, transaction_id, payload, created_at)
			SELECT gen_random_uuid(), p.id, 1000 + s, 'b' || s, '{}', now() FROM p, generate_series(1, $1) s`, []any{min(size.Messages/10, 1000000), behindQueue}},
		{"the behind partition's last_seq", `UPDATE queen.partitions p SET last_seq = coalesce((SELECT max(seq) FROM queen.messages m WHERE m.partition_id = p.id), p.last_seq)
			FROM queen.queues q WHERE q.id = p.queue_id AND q.name = $1`, []any{behindQueue}},
	}
	for _, s := range steps {
		start := time.Now()
		if _, err := e.pool.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Printf("  grew %s in %.1fs\n", s.what, time.Since(start).Seconds())
	}
	_, err := e.pool.Exec(ctx, `VACUUM (ANALYZE) queen.messages, queen.partitions, queen.partition_consumers, queen.dead_letter_queue, queen.kv, queen.queues`)
	return err
}

func (r scaleResult) print() {
	fmt.Printf("\nscale: %d queues, %d partitions, %d messages, %d dead letters, %d KV keys (grown in %.0fs)\n",
		r.Size.Queues, r.Size.Partitions, r.Size.Messages, r.Size.DLQ, r.Size.KV, r.Grow)
	fmt.Printf("  %-22s %10s %10s %10s %10s %8s\n", "operation", "small p50", "small p99", "large p50", "large p99", "large/small")
	for _, op := range r.Ops {
		extra := ""
		switch op.Name {
		case "retention pass":
			extra = fmt.Sprintf("  (rows deleted: %d small, %d large)", op.SmallRows, op.LargeRows)
		case "queue stats refresh":
			extra = "  (background, once per STATS_INTERVAL_MS on one broker: it counts every queue)"
		}
		fmt.Printf("  %-22s %8.2fms %8.2fms %8.2fms %8.2fms %8.2f%s\n", op.Name, op.SmallP50, op.SmallP99, op.LargeP50, op.LargeP99, op.Ratio, extra)
	}
}
