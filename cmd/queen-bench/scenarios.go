package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// latencyResult is push-to-pop latency at a fixed offered rate.
type latencyResult struct {
	Rate      int       `json:"ratePerSecond"`
	Samples   int       `json:"samples"`
	P50ms     float64   `json:"p50ms"`
	P99ms     float64   `json:"p99ms"`
	P50PerWin []float64 `json:"p50msPerWindow"`
	P99PerWin []float64 `json:"p99msPerWindow"`
	PushP50ms float64   `json:"pushP50ms"`
	PushP99ms float64   `json:"pushP99ms"`
	BrokerCPU float64   `json:"brokerCpuSecondsPer1000"`
	PGCPU     float64   `json:"postgresCpuSecondsPer1000"`
	LoadCPU   float64   `json:"loadGeneratorCpuSecondsPer1000"`
	TargetP99 float64   `json:"targetP99ms"`
	// Slowest is where the slowest 1 % of each window waited, the median
	// of each part over them: the push (send to its answer), queued (its
	// answer to the start of the pop request that took it, when every
	// consumer was busy) and the pop (from the later of those two to the
	// pop's answer: the wake, the claim and the answer).
	Slowest latencyParts `json:"slowestPercentMs"`
	Met     bool         `json:"met"`
}

// latency pushes 1,000 msg/s (10 producers, one message every 10 ms each)
// while 4 consumers long-poll, and measures from just before the push to the
// pop's answer. Reported: medians over windows of each window's p50 and p99.
func (e *env) latency(ctx context.Context) (latencyResult, error) {
	return e.pushToPop(ctx, "bench-latency", e.url, e, 10*time.Millisecond, 50)
}

// pushToPop is the latency measure with pushes sent to pushURL and the
// long polls parked on popper's broker (another broker, for the mesh).
func (e *env) pushToPop(ctx context.Context, queue, pushURL string, popper *env, every time.Duration, target float64) (latencyResult, error) {
	const producers = 10
	r := latencyResult{Rate: producers * int(time.Second/every), TargetP99: target}
	var pushP50, pushP99 []float64
	var slow []latencyParts
	before, selfBefore := e.cpu(), cpuSeconds(os.Getpid(), false)
	for win := 0; win < e.o.windows; win++ {
		lw, err := e.latencyWindow(ctx, queue, pushURL, popper, every, win, producers)
		if err != nil {
			return r, err
		}
		if lw.got.Load() != lw.sent.Load() {
			ledger.problem("latency window %d: %d pushed, %d delivered", win, lw.sent.Load(), lw.got.Load())
		}
		ledger.addQueued(queue, lw.sent.Load())
		r.Samples += len(lw.samples)
		r.P50PerWin = append(r.P50PerWin, percentile(lw.samples, 0.50))
		r.P99PerWin = append(r.P99PerWin, percentile(lw.samples, 0.99))
		pushP50 = append(pushP50, percentile(lw.pushes, 0.50))
		pushP99 = append(pushP99, percentile(lw.pushes, 0.99))
		slow = append(slow, lw.slowest(r.P99PerWin[len(r.P99PerWin)-1])...)
	}
	r.Slowest = medianParts(slow)
	r.PushP50ms, r.PushP99ms = median(pushP50), median(pushP99)
	after, selfAfter := e.cpu(), cpuSeconds(os.Getpid(), false)
	if r.Samples > 0 {
		k := 1000 / float64(r.Samples)
		r.BrokerCPU, r.PGCPU, r.LoadCPU = k*(after.broker-before.broker), k*(after.pg-before.pg), k*(selfAfter-selfBefore)
	}
	r.P50ms, r.P99ms = median(r.P50PerWin), median(r.P99PerWin)
	r.Met = r.P99ms < r.TargetP99
	return r, nil
}

// latWindow is what one window of pushToPop measured: end-to-end latencies
// (samples) and push latencies in ms, messages sent and received, and the
// producers' and consumers' errors.
type latWindow struct {
	mu              sync.Mutex
	samples, pushes []float64
	parts           []latencyParts // each sample's, in samples' order
	pushed          sync.Map       // transactionId -> when its push was answered
	sent, got       atomic.Int64
	errs            chan error
}

// latencyWindow runs one window of pushToPop: producers push through
// pushURL each every tick for the window, four consumers pop and ack from
// popper, and once the producers stop the consumers get up to 10 s to
// drain what was sent. It returns the first error a producer or consumer
// met.
func (e *env) latencyWindow(ctx context.Context, queue, pushURL string, popper *env, every time.Duration, win, producers int) (*latWindow, error) {
	lw := &latWindow{errs: make(chan error, producers+4)}
	wctx, cancel := context.WithTimeout(ctx, e.o.window)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.latencyProducer(ctx, wctx, lw, queue, pushURL, every, win, p)
		}()
	}
	cctx, stopConsumers := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	for c := 0; c < 4; c++ {
		cwg.Add(1)
		go func() { defer cwg.Done(); lw.consume(cctx, popper, queue) }()
	}
	wg.Wait()
	cancel()
	// Let the consumers drain what was sent, then stop them.
	deadline := time.Now().Add(10 * time.Second)
	for lw.got.Load() < lw.sent.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stopConsumers()
	cwg.Wait()
	close(lw.errs)
	for err := range lw.errs {
		return lw, err
	}
	return lw, nil
}

// latencyProducer pushes one message stamped with its send time every
// tick until wctx ends (a push in flight finishes: it is not cancelled),
// recording each push's latency; it stops at the first failed push.
func (e *env) latencyProducer(ctx, wctx context.Context, lw *latWindow, queue, pushURL string, every time.Duration, win, p int) {
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-wctx.Done():
			return
		case <-t.C:
		}
		body := fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p%d","transactionId":"lat-%d-%d-%d","payload":{"t":%d}}]}`,
			queue, p%8, win, p, i, time.Now().UnixNano())
		t0 := time.Now()
		code, resp, err := e.http.do(context.WithoutCancel(ctx), "POST", pushURL+"/api/v1/push", []byte(body))
		if err != nil || code != 201 {
			lw.errs <- fmt.Errorf("push: %d %s %v", code, resp, err)
			return
		}
		lw.pushed.Store(fmt.Sprintf("lat-%d-%d-%d", win, p, i), time.Now())
		lw.mu.Lock()
		lw.pushes = append(lw.pushes, float64(time.Since(t0))/1e6)
		lw.mu.Unlock()
		lw.sent.Add(1)
	}
}

// consume pops and acks from popper until c ends, recording each
// message's latency from its send stamp; it stops at the first error.
func (lw *latWindow) consume(c context.Context, popper *env, queue string) {
	for c.Err() == nil {
		start := time.Now()
		_, err := popper.popAck(c, queue, "", 100, true, func(p popped) {
			now := time.Now()
			lw.mu.Lock()
			defer lw.mu.Unlock()
			for _, m := range p.Messages {
				var d struct{ T int64 }
				if json.Unmarshal(m.Data, &d) == nil {
					lw.samples = append(lw.samples, float64(now.UnixNano()-d.T)/1e6)
					lw.parts = append(lw.parts, lw.partsOf(m.TransactionID, time.Unix(0, d.T), start, now))
				}
			}
			lw.got.Add(int64(len(p.Messages)))
		})
		if err != nil {
			lw.errs <- err
			return
		}
	}
}

// latencyParts splits one message's push-to-pop latency, in ms (see
// latencyResult.Slowest).
type latencyParts struct {
	Push   float64 `json:"push"`
	Queued float64 `json:"queued"`
	Pop    float64 `json:"pop"`
}

// partsOf splits the latency of the message txid, sent at sent, that the
// pop started at start answered at answered.
func (lw *latWindow) partsOf(txid string, sent, start, answered time.Time) latencyParts {
	v, ok := lw.pushed.Load(txid)
	if !ok { // popped before its producer heard the push's answer
		return latencyParts{Push: ms(answered.Sub(sent))}
	}
	pushed := v.(time.Time)
	from := start
	if pushed.After(start) {
		from = pushed
	}
	return latencyParts{Push: ms(pushed.Sub(sent)), Queued: max(0, ms(start.Sub(pushed))), Pop: ms(answered.Sub(from))}
}

// slowest are the parts of the samples at or above p99.
func (lw *latWindow) slowest(p99 float64) []latencyParts {
	var out []latencyParts
	for i, x := range lw.samples {
		if x >= p99 {
			out = append(out, lw.parts[i])
		}
	}
	return out
}

// medianParts is each part's median over ps.
func medianParts(ps []latencyParts) latencyParts {
	var push, queued, pop []float64
	for _, p := range ps {
		push, queued, pop = append(push, p.Push), append(queued, p.Queued), append(pop, p.Pop)
	}
	return latencyParts{Push: median(push), Queued: median(queued), Pop: median(pop)}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func (r latencyResult) print() {
	fmt.Printf("%-13s push-to-pop at %d msg/s offered (%d delivered): p50 %.1f ms, p99 %.1f ms (target p99 < %.0f ms, %s); per window p50 %v p99 %v; the push alone p50 %.1f ms p99 %.1f ms; CPU-s per 1,000 msgs: broker %.3f, postgres %.3f, load generator %.3f\n"+
		"              the slowest 1%% (medians): push %.1f ms, queued for a free consumer %.1f ms, pop (wake, claim, answer) %.1f ms\n",
		"latency", r.Rate, r.Samples, r.P50ms, r.P99ms, r.TargetP99, metWord(r.Met), rounded(r.P50PerWin), rounded(r.P99PerWin), r.PushP50ms, r.PushP99ms, r.BrokerCPU, r.PGCPU, r.LoadCPU,
		r.Slowest.Push, r.Slowest.Queued, r.Slowest.Pop)
}

func metWord(ok bool) string {
	if ok {
		return "MET"
	}
	return "below target"
}

// bootstrapResult is the many-partition start-up workload.
type bootstrapResult struct {
	Partitions     int     `json:"partitions"`
	Groups         int     `json:"groups"`
	Seconds        float64 `json:"seconds"`
	PushSeconds    float64 `json:"pushSeconds"`
	TargetSeconds  float64 `json:"targetSeconds"`
	Met            bool    `json:"met"`
	BrokerCPUPer1k float64 `json:"brokerCpuSecondsPer1000"`
	PGCPUPer1k     float64 `json:"postgresCpuSecondsPer1000"`
}

// bootstrap pushes one message into each of n new partitions (16
// producers) while two consumer groups (8 consumers each) pop and ack, and
// times until both groups have every message.
func (e *env) bootstrap(ctx context.Context, n int) (bootstrapResult, error) {
	const queue = "bench-bootstrap"
	groups := []string{"g1", "g2"}
	r := bootstrapResult{Partitions: n, Groups: len(groups), TargetSeconds: 120}
	before := e.cpu()
	start := time.Now()
	var next atomic.Int64
	var pwg sync.WaitGroup
	errs := make(chan error, 64)
	for p := 0; p < 16; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				body := fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p%d","transactionId":"boot-%d","payload":{"n":1}}]}`, queue, i, i)
				code, resp, err := e.http.do(ctx, "POST", e.url+"/api/v1/push", []byte(body))
				if err != nil || code != 201 {
					errs <- fmt.Errorf("push: %d %s %v", code, resp, err)
					return
				}
			}
		}()
	}
	done := map[string]*atomic.Int64{}
	for _, g := range groups {
		done[g] = &atomic.Int64{}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var cwg sync.WaitGroup
	for _, g := range groups {
		for c := 0; c < 8; c++ {
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				for cctx.Err() == nil && done[g].Load() < int64(n) {
					k, err := e.popAck(cctx, queue, g, 10, true, nil)
					if err != nil {
						if cctx.Err() == nil {
							errs <- err
						}
						return
					}
					done[g].Add(int64(k))
				}
			}()
		}
	}
	pwg.Wait()
	r.PushSeconds = elapsed(start)
	cwg.Wait()
	r.Seconds = elapsed(start)
	after := e.cpu()
	close(errs)
	for err := range errs {
		return r, err
	}
	for _, g := range groups {
		if got := done[g].Load(); got != int64(n) {
			return r, fmt.Errorf("group %s got %d of %d messages", g, got, n)
		}
	}
	ledger.addQueued(queue, int64(n))
	msgs := float64(n * (1 + len(groups)))
	r.BrokerCPUPer1k = 1000 * (after.broker - before.broker) / msgs
	r.PGCPUPer1k = 1000 * (after.pg - before.pg) / msgs
	r.Met = r.Seconds < r.TargetSeconds
	return r, nil
}

func (r bootstrapResult) print() {
	fmt.Printf("%-13s %d partitions, %d groups: %.1f s (pushes done at %.1f s; target < %.0f s, %s); CPU-s per 1,000 msgs: broker %.3f, postgres %.3f\n",
		"bootstrap", r.Partitions, r.Groups, r.Seconds, r.PushSeconds, r.TargetSeconds, metWord(r.Met), r.BrokerCPUPer1k, r.PGCPUPer1k)
}

// result is the JSON written at the end.
type result struct {
	Started     time.Time              `json:"started"`
	Window      string                 `json:"window"`
	Windows     int                    `json:"windows"`
	Comparisons []comparison           `json:"comparisons"`
	Latency     *latencyResult         `json:"latency,omitempty"`
	Bootstrap   *bootstrapResult       `json:"bootstrap,omitempty"`
	Mesh        *meshResult            `json:"mesh,omitempty"`
	Shards      *shardResult           `json:"shards,omitempty"`
	Stored      map[string]int64       `json:"storedPerQueue"`
	River       map[string]riverStored `json:"riverJobsPerQueue,omitempty"`
	ThreeWay    []string               `json:"threeWayTable,omitempty"`
	ExactlyOnce bool                   `json:"exactlyOnce"`
	Violations  []string               `json:"violations,omitempty"`
	AllMet      bool                   `json:"allTargetsMet"`
}

// verifyStored checks that every queue holds exactly the messages answered
// queued, each once.
func (e *env) verifyStored(ctx context.Context, res *result) error {
	return e.verifyStoredIn(ctx, res, nil)
}

// verifyStoredIn is verifyStored over the named queues only (nil: every
// queue), so a check on grown tables need not count the grown rows.
func (e *env) verifyStoredIn(ctx context.Context, res *result, queues []string) error {
	rows, err := e.pool.Query(ctx, `
		SELECT q.name, count(*), count(DISTINCT (m.partition_id, m.transaction_id))
		FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE $1::text[] IS NULL OR q.name = ANY($1)
		GROUP BY q.name`, queues)
	if err != nil {
		return err
	}
	defer rows.Close()
	res.Stored = map[string]int64{}
	for rows.Next() {
		var name string
		var n, distinct int64
		if err := rows.Scan(&name, &n, &distinct); err != nil {
			return err
		}
		res.Stored[name] = n
		if n != distinct {
			ledger.problem("%s: %d rows but %d distinct transactionIds", name, n, distinct)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for q, n := range ledger.queued {
		if res.Stored[q] != n {
			ledger.problem("%s: %d answered queued, %d stored", q, n, res.Stored[q])
		}
	}
	res.Violations = ledger.problems
	res.ExactlyOnce = len(ledger.problems) == 0
	fmt.Printf("\nexactly-once: %s (%d queues checked)\n", map[bool]string{true: "verified", false: "VIOLATED " + strings.Join(ledger.problems, "; ")}[res.ExactlyOnce], len(ledger.queued))
	return nil
}

func (r *result) check() {
	r.AllMet = (r.Latency == nil || r.Latency.Met) && (r.Bootstrap == nil || r.Bootstrap.Met) && (r.Mesh == nil || r.Mesh.Met) && r.Shards.met()
	for _, c := range r.Comparisons {
		r.AllMet = r.AllMet && c.Met
	}
}
