package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// workload is one broker figure and the raw PostgreSQL figure it is a
// ratio to.
type workload struct {
	name, raw string
	target    float64
	setup     func(ctx context.Context, e *env) error
	// refill, when set, runs untimed before every window (raw and broker),
	// so neither side ever runs out of backlog mid-window.
	refill   func(ctx context.Context, e *env) error
	rawOp    func(e *env) (workers int, op func(ctx context.Context, worker, iter int) (int, error))
	brokerOp func(e *env, win int) (workers int, op func(ctx context.Context, worker, iter int) (int, error))
	// teardown, when set, runs after the workload (its second broker stops,
	// so it weighs on no later workload).
	teardown func()
	late     bool // runs after bootstrap
	// peers are River's columns (none when -river is empty), and row the
	// workload's label in the three-way table.
	peers []peerSpec
	row   string
}

// riverConsumers is the consume peer's MaxWorkers. At River's default
// fetch settings a queue fetches at most every 100 ms (FetchCooldown), up
// to MaxWorkers jobs, so MaxWorkers caps its rate near ten times itself per
// second: at 100 it measured exactly 1,000/s, a cap of River's settings
// rather than of PostgreSQL. 1,000 is the order River's own benchmark
// found best.
const riverConsumers = 1000

// withRiver gives w River columns and a row in the three-way table.
func withRiver(w workload, row string, peers ...peerSpec) workload {
	w.row, w.peers = row, peers
	return w
}

// books is what the exactly-once verification needs from the workloads.
type books struct {
	mu        sync.Mutex
	queued    map[string]int64 // queue -> pushes answered queued
	delivered sync.Map         // queue/group/txid -> struct{}
	problems  []string
}

var ledger = newBooks()

func newBooks() *books { return &books{queued: map[string]int64{}} }

// ledger is the books e's pushes and deliveries are kept in: the run's,
// unless e keeps its own (the shard workloads' databases are checked
// apart).
func (e *env) ledger() *books {
	if e.books != nil {
		return e.books
	}
	return ledger
}

func (b *books) problem(format string, a ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) < 20 {
		b.problems = append(b.problems, fmt.Sprintf(format, a...))
	}
}

func (b *books) addQueued(queue string, n int64) {
	b.mu.Lock()
	b.queued[queue] += n
	b.mu.Unlock()
}

// deliver records a delivery and reports a second one to the same group.
func (b *books) deliver(queue, group, txid string) {
	if _, dup := b.delivered.LoadOrStore(queue+"/"+group+"/"+txid, struct{}{}); dup {
		b.problem("%s: %s delivered twice to group %s", queue, txid, group)
	}
}

func workloads() []workload {
	return []workload{
		withRiver(pushWorkload("push-b1", 1, 50, "single-row INSERT commits/s, 16 clients", 0.7, rawInsert(1, 16)),
			"1 message per request / Insert, 50 clients", peerSpec{name: "river", workload: "push-b1", clients: 50, batch: 1}),
		pushWorkload("push-b10", 10, 32, "100-row INSERT rows/s, 4 clients", 0.4, rawInsert(100, 4)),
		withRiver(pushWorkload("push-b100", 100, 16, "100-row INSERT rows/s, 4 clients", 0.6, rawInsert(100, 4)),
			"100 per request / InsertMany, 16 clients",
			peerSpec{name: "river", workload: "push-b100", clients: 16, batch: 100},
			peerSpec{name: "river-copy", workload: "push-b100-copy", clients: 16, batch: 100}),
		withRiver(popWorkload("pop+ack-b10", 10, 10, 0.7, 6000),
			"consume + ack, batch 10 / River's workers", peerSpec{name: "river", workload: "consume", clients: riverConsumers}),
		popWorkload("pop+ack-b100", 100, 10, 0.6, 25000),
		recordingWorkload(),
	}
}

// rawSeq numbers raw rows across every raw workload.
var rawSeq atomic.Int64

const rawSchema = `
CREATE TABLE IF NOT EXISTS raw_messages (
	id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	partition_id int NOT NULL,
	seq bigserial,
	transaction_id text NOT NULL,
	payload jsonb,
	created_at timestamptz NOT NULL DEFAULT now(),
	UNIQUE (partition_id, transaction_id));
CREATE TABLE IF NOT EXISTS raw_queue (
	id bigserial PRIMARY KEY,
	partition_id int NOT NULL,
	payload jsonb,
	created_at timestamptz NOT NULL DEFAULT now())`

// rawInsert is n-row INSERTs into a table shaped like queen.messages.
func rawInsert(rows, clients int) func(e *env) (int, func(ctx context.Context, worker, iter int) (int, error)) {
	return func(e *env) (int, func(ctx context.Context, worker, iter int) (int, error)) {
		return clients, func(ctx context.Context, worker, iter int) (int, error) {
			parts, txids := make([]int32, rows), make([]string, rows)
			for i := range txids {
				parts[i] = int32(rand.IntN(10))
				txids[i] = fmt.Sprint("raw-", rawSeq.Add(1))
			}
			_, err := e.pool.Exec(context.WithoutCancel(ctx), `INSERT INTO raw_messages (partition_id, transaction_id, payload)
				SELECT p, t, '{"n":1}'::jsonb FROM unnest($1::int[], $2::text[]) AS v(p, t)`, parts, txids)
			return rows, err
		}
	}
}

func pushWorkload(name string, batch, producers int, raw string, target float64,
	rawOp func(e *env) (int, func(ctx context.Context, worker, iter int) (int, error))) workload {
	queue := "bench-" + name
	return workload{name: name, raw: raw, target: target, rawOp: rawOp,
		setup: func(ctx context.Context, e *env) error {
			_, err := e.pool.Exec(ctx, rawSchema)
			return err
		},
		brokerOp: func(e *env, win int) (int, func(ctx context.Context, worker, iter int) (int, error)) {
			return producers, pushOp(e, e.url, queue, name, batch, win)
		}}
}

// pushOp pushes batch fresh messages to queue on the broker at url per
// call, and books them for the exactly-once check.
func pushOp(e *env, url, queue, name string, batch, win int) func(ctx context.Context, worker, iter int) (int, error) {
	return func(ctx context.Context, worker, iter int) (int, error) {
		items := make([]string, batch)
		for k := range items {
			items[k] = fmt.Sprintf(`{"queue":%q,"partition":"p%d","transactionId":"%s-%d-%d-%d-%d","payload":{"n":1}}`,
				queue, rand.IntN(10), name, win, worker, iter, k)
		}
		body := []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
		code, resp, err := e.http.do(context.WithoutCancel(ctx), "POST", url+"/api/v1/push", body)
		if err != nil {
			return 0, err
		}
		var out []struct{ Status string }
		if code != 201 || json.Unmarshal(resp, &out) != nil || len(out) != batch {
			return 0, fmt.Errorf("push: %d %s", code, resp)
		}
		for _, r := range out {
			if r.Status != "queued" {
				e.ledger().problem("%s: a fresh transactionId answered %q", queue, r.Status)
			}
		}
		e.ledger().addQueued(queue, int64(batch))
		return batch, nil
	}
}

// recordingWorkload is push-b1 with recorded analytics (this broker)
// against the same pushes to a second broker on the same PostgreSQL with
// QUEEN_ANALYTICS=false, in alternating windows: what recording costs a
// push. The second broker starts in setup and stops after the workload.
func recordingWorkload() workload {
	const name, producers = "push-b1-recording", 50
	var off *env
	var stopOff func()
	offWindows := 0 // rawOp is made once per window: each window's txids are fresh
	return workload{name: name, raw: "the same pushes to a broker with QUEEN_ANALYTICS=false", target: 0.95, late: true,
		setup: func(ctx context.Context, e *env) error {
			o, stop, err := startBroker(ctx, e.o, e.pool, e.pg, filepath.Join(e.dir, "spool-norec"), "QUEEN_ANALYTICS=false", "RETENTION_INTERVAL=86400000", "LOG_LEVEL=error", "QUEEN_PPROF_ADDR=")
			if err != nil {
				return err
			}
			off, stopOff = o, stop
			return nil
		},
		teardown: func() {
			if stopOff != nil {
				stopOff()
			}
		},
		rawOp: func(e *env) (int, func(ctx context.Context, worker, iter int) (int, error)) {
			offWindows++
			return producers, pushOp(e, off.url, "bench-recording-off", name+"-off", 1, offWindows)
		},
		brokerOp: func(e *env, win int) (int, func(ctx context.Context, worker, iter int) (int, error)) {
			return producers, pushOp(e, e.url, "bench-recording-on", name, 1, win)
		}}
}

type popped struct {
	LeaseID  string `json:"leaseId"`
	Messages []struct {
		TransactionID string          `json:"transactionId"`
		PartitionID   string          `json:"partitionId"`
		Data          json.RawMessage `json:"data"`
	} `json:"messages"`
}

// popAck pops up to batch messages of queue for group and acks them all.
// It returns how many it completed (0 when the pop found nothing).
func (e *env) popAck(ctx context.Context, queue, group string, batch int, wait bool, seen func(popped)) (int, error) {
	url := fmt.Sprintf("%s/api/v1/pop/queue/%s?batch=%d&wait=%t&timeout=1000", e.url, queue, batch, wait)
	if group != "" {
		url += "&consumerGroup=" + group
	}
	// Never cancelled mid-flight: a claim whose answer is lost would hold
	// its partition for a whole lease.
	code, body, err := e.http.do(context.WithoutCancel(ctx), "GET", url, nil)
	if err != nil || code == 204 {
		return 0, err
	}
	var p popped
	if code != 200 || json.Unmarshal(body, &p) != nil {
		return 0, fmt.Errorf("pop: %d %s", code, body)
	}
	if seen != nil {
		seen(p)
	}
	acks := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		e.ledger().deliver(queue, group, m.TransactionID)
		acks[i] = fmt.Sprintf(`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`, m.TransactionID, m.PartitionID, p.LeaseID)
	}
	ackBody := fmt.Sprintf(`{"consumerGroup":%q,"acknowledgments":[%s]}`, group, strings.Join(acks, ","))
	code, body, err = e.http.do(context.WithoutCancel(ctx), "POST", e.url+"/api/v1/ack/batch", []byte(ackBody))
	if err != nil {
		return 0, err
	}
	var res []struct {
		Success bool
		Error   *string
	}
	if code != 200 || json.Unmarshal(body, &res) != nil {
		return 0, fmt.Errorf("ack: %d %s", code, body)
	}
	for _, r := range res {
		if !r.Success {
			e.ledger().problem("%s: ack refused: %v", queue, r.Error)
		}
	}
	return len(p.Messages), nil
}

// popWorkload pops and acks a prefilled backlog; raw deletes from an equal
// backlog with SKIP LOCKED.
func popWorkload(name string, batch, consumers int, target float64, perPartition int) workload {
	queue := "bench-" + strings.ReplaceAll(name, "+", "")
	const partitions = 20
	raw := fmt.Sprintf("SELECT ... FOR UPDATE SKIP LOCKED LIMIT %d + DELETE rows/s, 4 clients", batch)
	return workload{name: name, raw: raw, target: target,
		setup: func(ctx context.Context, e *env) error {
			if _, err := e.pool.Exec(ctx, rawSchema); err != nil {
				return err
			}
			if _, err := e.pool.Exec(ctx, `TRUNCATE raw_queue`); err != nil {
				return err
			}
			return e.createPartitions(ctx, queue, partitions)
		},
		refill: func(ctx context.Context, e *env) error {
			if _, err := e.pool.Exec(ctx, `INSERT INTO raw_queue (partition_id, payload)
				SELECT g % 20, '{"n":1}' FROM generate_series(1, greatest(0, $1::int - (SELECT count(*) FROM raw_queue)::int)) g`,
				perPartition*partitions); err != nil {
				return err
			}
			return e.topUp(ctx, queue, perPartition)
		},
		rawOp: func(e *env) (int, func(ctx context.Context, worker, iter int) (int, error)) {
			return 4, func(ctx context.Context, worker, iter int) (int, error) {
				tag, err := e.pool.Exec(context.WithoutCancel(ctx), `DELETE FROM raw_queue WHERE id IN (
					SELECT id FROM raw_queue ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)`, batch)
				return int(tag.RowsAffected()), err
			}
		},
		brokerOp: func(e *env, win int) (int, func(ctx context.Context, worker, iter int) (int, error)) {
			return consumers, func(ctx context.Context, worker, iter int) (int, error) {
				return e.popAck(ctx, queue, "", batch, false, nil)
			}
		}}
}

// createPartitions creates queue with its partitions through the broker.
func (e *env) createPartitions(ctx context.Context, queue string, partitions int) error {
	items := make([]string, partitions)
	for i := range items {
		items[i] = fmt.Sprintf(`{"queue":%q,"partition":"p%d","transactionId":"seed-%d","payload":{"n":0}}`, queue, i, i)
	}
	if code, body, err := e.http.do(ctx, "POST", e.url+"/api/v1/push", []byte(`{"items":[`+strings.Join(items, ",")+`]}`)); err != nil || code != 201 {
		return fmt.Errorf("create partitions: %d %s %v", code, body, err)
	}
	e.ledger().addQueued(queue, int64(partitions))
	return nil
}

// topUp appends messages straight into each partition of queue until it
// has perPartition past the queue-mode cursor, keeping seq and last_seq as
// the broker would. Untimed: it sets up the next window.
func (e *env) topUp(ctx context.Context, queue string, perPartition int) error {
	var added int64
	err := e.pool.QueryRow(ctx, `
		WITH p AS (
			SELECT p.id, p.last_seq, greatest(0, $2::int - (p.last_seq - coalesce(pc.last_consumed_seq, 0)))::int AS need
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			LEFT JOIN queen.partition_consumers pc ON pc.partition_id = p.id AND pc.consumer_group = '__QUEUE_MODE__'
			WHERE q.name = $1
			FOR UPDATE OF p
		), ins AS (
			INSERT INTO queen.messages (id, partition_id, seq, transaction_id, payload, created_at)
			SELECT gen_random_uuid(), p.id, p.last_seq + g, 'pre-' || p.id || '-' || (p.last_seq + g), '{"n":1}', now()
			FROM p, generate_series(1, p.need) g
			RETURNING 1
		), moved AS (
			UPDATE queen.partitions x SET last_seq = x.last_seq + p.need, appended = x.appended + p.need FROM p WHERE x.id = p.id AND p.need > 0
		)
		SELECT count(*) FROM ins`, queue, perPartition).Scan(&added)
	if err != nil {
		return fmt.Errorf("top up: %w", err)
	}
	e.ledger().addQueued(queue, added)
	return nil
}

// comparison is one workload's result.
type comparison struct {
	Name           string    `json:"name"`
	Raw            string    `json:"raw"`
	RawRates       []float64 `json:"rawRates"`
	BrokerRates    []float64 `json:"brokerRates"`
	RawMedian      float64   `json:"rawMedian"`
	BrokerMedian   float64   `json:"brokerMedian"`
	Ratio          float64   `json:"ratio"`
	Target         float64   `json:"target"`
	Met            bool      `json:"met"`
	BrokerCPUPer1k float64   `json:"brokerCpuSecondsPer1000"`
	PGCPUPer1k     float64   `json:"postgresCpuSecondsPer1000"`
	RawPGCPUPer1k  float64   `json:"rawPostgresCpuSecondsPer1000"`
	WALPerMsg      float64   `json:"walBytesPerMessage"`
	RawWALPerMsg   float64   `json:"rawWalBytesPerMessage"`
	// Peers are River's columns, when the workload has them.
	Peers []peerResult `json:"peers,omitempty"`
	Row   string       `json:"-"` // the three-way table's label
}

// compare alternates raw, broker and River windows, each after a
// checkpoint.
func (e *env) compare(ctx context.Context, w workload) (comparison, error) {
	c := comparison{Name: w.name, Raw: w.raw, Target: w.target}
	if err := w.setup(ctx, e); err != nil {
		return c, err
	}
	var raw, broker tally
	if e.o.river == "" {
		w.peers = nil
	}
	peers := make([]tally, len(w.peers))
	for win := 0; win < e.o.windows; win++ {
		if err := e.timed(ctx, w, &raw, false, func() (int, func(ctx context.Context, worker, iter int) (int, error)) {
			return w.rawOp(e)
		}); err != nil {
			return c, fmt.Errorf("raw window: %w", err)
		}
		if err := e.timed(ctx, w, &broker, true, func() (int, func(ctx context.Context, worker, iter int) (int, error)) {
			return w.brokerOp(e, win)
		}); err != nil {
			return c, fmt.Errorf("broker window: %w", err)
		}
		for i, p := range w.peers {
			if err := e.peerWindow(ctx, p, &peers[i]); err != nil {
				return c, fmt.Errorf("%s window: %w", p.name, err)
			}
		}
	}
	c.RawRates, c.BrokerRates = raw.rates, broker.rates
	c.RawMedian, c.BrokerMedian = median(c.RawRates), median(c.BrokerRates)
	if c.RawMedian > 0 {
		c.Ratio = c.BrokerMedian / c.RawMedian
	}
	c.Met = c.Ratio >= c.Target
	c.BrokerCPUPer1k, c.PGCPUPer1k, c.RawPGCPUPer1k = broker.per1k(broker.own), broker.per1k(broker.pg), raw.per1k(raw.pg)
	c.WALPerMsg, c.RawWALPerMsg = broker.walPerMsg(), raw.walPerMsg()
	for i, p := range w.peers {
		c.Peers = append(c.Peers, peers[i].peerResult(p))
	}
	c.Row = w.row
	return c, nil
}

// timed runs one raw (broker false) or broker window of w after its refill
// and a checkpoint, adding it to t.
func (e *env) timed(ctx context.Context, w workload, t *tally, broker bool, mk func() (int, func(ctx context.Context, worker, iter int) (int, error))) error {
	if w.refill != nil {
		if err := w.refill(ctx, e); err != nil {
			return err
		}
	}
	if err := e.checkpoint(ctx); err != nil {
		return err
	}
	workers, op := mk()
	if broker {
		if err := e.profileReset(ctx); err != nil {
			return err
		}
	}
	before, err := e.markBefore(ctx)
	if err != nil {
		return err
	}
	n, err := window(ctx, e.o.window, workers, op)
	if err != nil {
		return err
	}
	after, err := e.markAfter(ctx)
	if err != nil {
		return err
	}
	own := 0.0
	if broker {
		own = after.broker - before.broker
		if err := e.countStatements(ctx, t); err != nil {
			return err
		}
		if err := e.profileDump(ctx, w.name, n); err != nil {
			return err
		}
	}
	t.add(n, e.o.window.Seconds(), before, after, own)
	return nil
}

func (c comparison) print() {
	mark := "MET"
	if !c.Met {
		mark = "below target"
	}
	fmt.Printf("%-13s broker %9.0f msg/s  raw %9.0f/s (%s)  ratio %.2f (target >= %.2f, %s)\n",
		c.Name, c.BrokerMedian, c.RawMedian, c.Raw, c.Ratio, c.Target, mark)
	fmt.Printf("%-13s windows broker %v raw %v; CPU-s per 1,000 msgs: broker %.3f, postgres %.3f (raw: postgres %.3f); WAL %.0f B/msg (raw %.0f)\n",
		"", rounded(c.BrokerRates), rounded(c.RawRates), c.BrokerCPUPer1k, c.PGCPUPer1k, c.RawPGCPUPer1k, c.WALPerMsg, c.RawWALPerMsg)
	for _, p := range c.Peers {
		p.print()
	}
}

func rounded(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x + 0.5)
	}
	return out
}

// elapsed is a small helper for timing phases.
func elapsed(start time.Time) float64 { return time.Since(start).Seconds() }
