package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/httpapi"
	"github.com/queen-go/queen/queen/store"
)

// Result is what a run produced and what the checkers found.
type Result struct {
	History    *History
	Hash       string // lockstep: identical for identical seeds
	Ops        int
	Faults     int
	Fired      map[string]int
	Violations []Violation
	// Missing names "sometimes" events the scenario required that never
	// happened.
	Missing []string
	// Starved says which precondition a scheduled fault lacked (the
	// workload had ended, its broker was not up): why a Missing event
	// is missing.
	Starved []string
	// Coverage is the cells of the coverage matrix the run reached.
	Coverage Coverage
}

// Failed reports whether the run broke a property or missed coverage.
func (r *Result) Failed() bool { return len(r.Violations) > 0 || len(r.Missing) > 0 }

// Summary is a one-paragraph account of the run.
func (r *Result) Summary() string {
	fired := make([]string, 0, len(r.Fired))
	for k, v := range r.Fired {
		if v != 0 {
			fired = append(fired, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(fired)
	s := fmt.Sprintf("%d ops, %d faults scheduled, %d events, fired %v, hash %.12s", r.Ops, r.Faults, len(r.History.Events()), fired, r.Hash)
	for _, v := range r.Violations {
		s += "\n  VIOLATION " + v.String()
	}
	for _, m := range r.Missing {
		s += "\n  NEVER HAPPENED (sometimes): " + m
	}
	for _, m := range r.Starved {
		s += "\n  STARVED: " + m
	}
	return s
}

// extendSecs is how far the workload renews a lease.
const extendSecs = 30

// epoch is the virtual instant every lockstep run starts at.
var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

type client struct {
	mu     sync.Mutex // free-running: a crash may abandon while the worker runs
	id     int
	broker int
	held   []*held
	timers []timerRef
	kv     []kvRef
	// streams are source batches popped and not yet committed.
	streams []*streamBatch
	// pops counts its workload pops, for directPop.
	pops int
	// extraOps counts the requests of its last step beyond the first (a
	// burst's), so a burst spends the workload's ops, not adds to them.
	extraOps int
}

type runner struct {
	o       Options
	world   *ShardWorld // nil: no shards
	move    *moveRun    // the world's move of o.Move, nil without one
	rng     *rand.Rand
	pg      *clock.Sim
	start   time.Time
	cluster *Cluster
	act     *actor
	hist    *History
	clients []*client
	mu      sync.Mutex // guards pushed and nextTx (free-running workers share them)
	pushed  []Key
	nextTx  int
	// hotStarted: tenant/queue pairs that had their first push (hot runs).
	hotStarted map[string]bool
	fmu        sync.Mutex // free-running: serialises fault injection with heal
	fired      map[string]int
	active     []activeFault
	ctx        context.Context
	// jobs are the forced double-leader passes (leader.double) still
	// running; heal waits for them.
	jobs       sync.WaitGroup
	doublePass atomic.Int64 // retention passes run by forced double leaders
	// leaderKills counts the lock sessions leader.kill ended.
	leaderKills atomic.Int64
	doubleRows  atomic.Int64 // rows those passes deleted
	// wakeProbes counts the wake probes judged (wake.probe), and
	// probeStarved says why others could not be (pmu guards it: heal
	// holds fmu while it waits for the probes).
	wakeProbes atomic.Int64
	// probes are the running wake and re-create probes.
	probes sync.WaitGroup
	// recreateProbes counts the re-create probes judged (queue.recreate).
	recreateProbes atomic.Int64
	// rowLocks counts the row locks an outside session held (pg.rowlock).
	rowLocks atomic.Int64
	// staleProbes counts the stale-cache probes judged (cache.stale).
	staleProbes  atomic.Int64
	pmu          sync.Mutex
	probeStarved []string
	// streamQueries is the counting query's id per tenant.
	streamQueries map[string]string
	// edges are the keys pushed past a limit (queen/limits), and how.
	edges map[Key]string
	// sealedSince is when (database time) a queue.encrypt fault's
	// configure committed, per (tenant, queue).
	sealedSince map[[2]string]time.Time
	// faultsLeft counts the free-running schedule's faults not yet
	// injected: the workload goes on past its ops while any is left, so a
	// fault is never scheduled after the load it is meant to hit.
	faultsLeft atomic.Int64
	// starved says, per fault, why it could not do what it was scheduled
	// for; a missing "sometimes" event is reported with these.
	starved []string
	// leaves counts the leaving pops that could ask for autoAck.
	leaves int
	// retentionFaults are the retention.fail faults scheduled; each runs
	// after the drain (probeRetention).
	retentionFaults []FaultAt
	// lead numbers the leader passes and holds the cuts still to make
	// (leader.cut).
	lead leaderPasses
	// sealedProbe: the sealed-paths probe wrote into SealedQueue, which
	// the final drain empties (drainSealed).
	sealedProbe bool
	// edgeN counts what the routes' edge inputs are chosen among (edges_routes.go).
	edgeN edgeRoutes
	// late are the late subscriptions' progress, lateN their decisions
	// (subs.go).
	late  []*lateRun
	lateN int
}

type activeFault struct {
	kind   string
	broker int
	until  time.Time
}

// Run executes one scenario against the migrated database dsn and checks
// it. The error is for harness failures; property failures are in Result.
func Run(ctx context.Context, dsn string, o Options, log io.Writer) (*Result, error) {
	o.defaults()
	if o.Mode == "free" {
		return runFree(ctx, dsn, o, log)
	}
	return runLockstep(ctx, dsn, nil, o, log)
}

// runLockstep is a lockstep run against dsn; with world, the brokers
// have shards (dsn is the first's) and the runner's mover moves o.Move.
func runLockstep(ctx context.Context, dsn string, world *ShardWorld, o Options, log io.Writer) (*Result, error) {
	r := &runner{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15)), pg: clock.NewSim(epoch), start: epoch,
		hist: &History{}, fired: map[string]int{}, ctx: ctx, world: world}
	if err := r.setup(dsn, log); err != nil {
		return nil, err
	}
	defer r.cluster.Close()
	if err := r.openMove(); err != nil {
		return nil, err
	}
	defer r.closeMove()
	faultsLeft := append([]FaultAt(nil), o.Faults...)
	sort.SliceStable(faultsLeft, func(i, j int) bool { return faultsLeft[i].At < faultsLeft[j].At })
	step := o.VTime / time.Duration(o.Ops)
	for i := 0; i < o.Ops; i++ {
		now := r.start.Add(time.Duration(i) * step)
		r.pg.AdvanceTo(now)
		r.expireFaults(now)
		for len(faultsLeft) > 0 && r.start.Add(faultsLeft[0].At).Compare(now) <= 0 {
			if err := r.inject(faultsLeft[0]); err != nil {
				return nil, err
			}
			faultsLeft = faultsLeft[1:]
		}
		r.lateExtends()
		r.step(r.rng, r.clients[r.rng.IntN(len(r.clients))])
		r.lateStep()
		r.stepServices()
		if err := r.stepMove(i); err != nil {
			return nil, err
		}
	}
	if err := r.heal(); err != nil {
		return nil, err
	}
	if err := r.finishMove(); err != nil {
		return nil, err
	}
	return r.conclude(dsn, o.Ops)
}

// setup starts the cluster (lockstep when the runner has a virtual clock),
// the clients and the queues.
func (r *runner) setup(dsn string, log io.Writer) error {
	var err error
	for try := 0; ; try++ {
		r.cluster, err = NewCluster(r.ctx, ClusterOptions{DSN: dsn, Brokers: r.o.Brokers, Seed: r.o.Seed, Shards: r.world.config(),
			Lockstep: r.pg != nil, PG: r.pg, Log: log, OnTimerClaim: r.noteClaim, OnPopClaim: r.notePopClaim,
			OnLeaderPass: r.noteLeaderPass})
		// The mesh ports are picked free and then bound by the brokers: on
		// a busy machine another process can take one in between. That is
		// the harness's race, not the broker's: pick again.
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || try == 4 {
			break
		}
	}
	if err != nil {
		return err
	}
	r.act = &actor{cluster: r.cluster, hist: r.hist, vt: r.vt}
	for i := 0; i < r.o.Clients; i++ {
		r.clients = append(r.clients, &client{id: i + 1, broker: i % r.o.Brokers})
	}
	if err := r.configure(); err != nil {
		r.cluster.Close()
		return err
	}
	if err := r.setupStreams(dsn); err != nil {
		r.cluster.Close()
		return err
	}
	return nil
}

// conclude is the end of every run: let the spools replay, drain every
// group, read the database, stop the brokers, check for leaked connections,
// then judge the history.
func (r *runner) conclude(dsn string, ops int) (*Result, error) {
	r.settleSpools()
	if err := r.settleTimers(dsn); err != nil {
		return nil, err
	}
	r.drain()
	r.drainSealed()
	r.drainStreams()
	r.probeRetentions(dsn)
	res := &Result{History: r.hist, Ops: ops, Faults: len(r.o.Faults), Fired: r.fired, Starved: r.starved}
	var dbNow *time.Time
	if r.pg != nil {
		t := r.pg.Now()
		dbNow = &t
	}
	quarantined, err := r.cluster.Quarantined()
	if err != nil {
		return nil, err
	}
	if err := finalRead(r.ctx, dsn, r.hist, r.vt(), dbNow, r.sealedSince, quarantined, r.finalShardRead); err != nil {
		return nil, err
	}
	r.cluster.Shutdown(r.ctx)
	r.cluster.Close()
	if err := checkLeaks(r.ctx, dsn, r.cluster.AppPrefix); err != nil {
		res.Violations = append(res.Violations, Violation{"leaks", err.Error()})
	}
	for k, v := range r.cluster.Fired() {
		res.Fired[k] += v
	}
	finish(res, r.o)
	return res, nil
}

// finish runs the checkers, the coverage check and the hash.
func finish(res *Result, o Options) {
	h := res.History.Events()
	judged := Generations(h, o.Spec())
	for _, name := range o.Expect {
		if c, ok := CheckerNamed(name); ok {
			res.Violations = append(res.Violations, c.Check(judged, o.Spec())...)
		}
	}
	for _, e := range h {
		switch {
		case e.Kind == KInfo && e.Op == "pop" && e.Err == Cancelled:
			res.Fired["pop.cancelled"]++
		case e.Kind == KOK && e.Op == "stream-cycle":
			res.Fired["stream."+e.Status]++ // committed, rejected
		}
	}
	for _, e := range judged {
		if e.Kind == KInvoke && e.Op == "push" && strings.Contains(e.Txid, "~") {
			res.Fired["push.reinserted"]++ // maybe stored again after retention or eviction deleted it
		}
	}
	edgesFired(h, res.Fired)
	if recovered(h) > 0 {
		res.Fired["lease.recovered"] = recovered(h)
	}
	for _, e := range h {
		if e.Kind == KOK && e.Op == "push" && (e.Status == "duplicate" || e.Status == "buffered") {
			res.Fired["push."+e.Status]++
		}
	}
	for _, s := range o.Sometimes {
		if res.Fired[s] == 0 {
			res.Missing = append(res.Missing, s)
		}
	}
	sum := sha256.New()
	enc := json.NewEncoder(sum)
	for _, e := range h {
		e.Session = 0 // a backend pid: not replayable
		_ = enc.Encode(e)
	}
	res.Hash = hex.EncodeToString(sum.Sum(nil))
	res.Coverage = Cover(h)
}

// recovered counts abandoned deliveries that were delivered again.
func recovered(h []Event) int {
	t := build(h)
	abandonedAt := map[string]int{}
	for _, e := range h {
		if e.Kind == KClient && e.What == "abandon" {
			abandonedAt[e.Lease] = e.Index
		}
	}
	n := 0
	for _, d := range t.deliveries {
		at, ok := abandonedAt[d.lease]
		if !ok {
			continue
		}
		for _, d2 := range t.deliveries {
			if d2.key == d.key && d2.group == d.group && d2.okI > at {
				n++
				break
			}
		}
	}
	return n
}

// stepServices runs every background service that is due on each running
// broker, by that broker's own clock (lockstep: the driver is the shell).
func (r *runner) stepServices() {
	for b := 0; b < r.o.Brokers; b++ {
		br := r.cluster.Broker(b)
		if br == nil {
			continue
		}
		now := r.cluster.Now(b)
		for _, svc := range br.Services() {
			// A shard world's moves are the runner's to step (runMove):
			// the broker's mover would wait on the virtual clock.
			if svc.Name() == "mover" {
				continue
			}
			if !svc.NextDue(now).After(now) {
				_ = svc.RunOnce(r.ctx)
			}
		}
	}
}

// settleSpools lets every spool drain after the heal: lockstep steps the
// drains on virtual time (cooldowns included); free-running waits for the
// background drains, within the convergence bound.
func (r *runner) settleSpools() {
	deadline := r.vt() + r.o.Converge.Milliseconds()
	for r.cluster.SpoolPending() > 0 && r.vt() < deadline {
		if r.pg != nil {
			r.pg.Advance(100 * time.Millisecond)
			r.stepServices()
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (r *runner) vt() int64 {
	if r.pg == nil {
		return time.Since(r.start).Milliseconds()
	}
	return r.pg.Now().Sub(r.start).Milliseconds()
}

// wait lets d pass: virtual time in lockstep, real time when free-running.
func (r *runner) wait(d time.Duration) {
	if r.pg == nil {
		time.Sleep(d)
		return
	}
	r.pg.Advance(d)
}

// setupCall makes a call that prepares the run (it is not part of the
// history), retrying transport errors and 5xx for up to a minute of real
// time: a loaded machine may need several tries to connect, and a setup
// step that gives up fails the run for no fault of the broker.
func (r *runner) setupCall(method, path, tenant string, body []byte) (int, []byte, error) {
	deadline := time.Now().Add(time.Minute)
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		code, raw, err := r.cluster.Do(r.ctx, 0, method, path, tenant, body)
		if (err == nil && code < 500) || time.Now().After(deadline) || r.ctx.Err() != nil {
			return code, raw, err
		}
		time.Sleep(pause)
	}
}

func (r *runner) configure() error {
	for _, t := range r.o.Tenants {
		for _, q := range r.o.Queues {
			opts := map[string]any{"leaseTime": q.LeaseSecs, "retryLimit": 2}
			if q.CompletedRetentionSecs > 0 {
				opts["retentionEnabled"], opts["completedRetentionSeconds"] = true, q.CompletedRetentionSecs
			}
			if q.MaxWaitSecs > 0 {
				opts["maxWaitTimeSeconds"] = q.MaxWaitSecs
			}
			queueOptions(opts, q)
			body, _ := json.Marshal(map[string]any{"queue": q.Name, "options": opts})
			code, raw, err := r.setupCall("POST", "/api/v1/configure", t, body)
			if err != nil || code != 200 {
				return fmt.Errorf("configure %s: %d %s %v", q.Name, code, raw, err)
			}
			r.noteQueue(t, q.Name, q.options())
			if q.CompletedRetentionSecs > 0 || q.MaxWaitSecs > 0 {
				if err := r.subscribe(t, q); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// subscribe starts every group of q before anything is pushed, as
// consumers started before producers would: completed retention waits only
// for groups that exist, and the checkers expect each listed group to see
// every message.
func (r *runner) subscribe(tenant string, q QueueSpec) error {
	for _, g := range q.Groups {
		path := "/api/v1/pop/queue/" + url.PathEscape(q.Name) + "?batch=1"
		if g != QueueMode {
			path += "&consumerGroup=" + url.QueryEscape(g)
		}
		code, raw, err := r.setupCall("GET", path, tenant, nil)
		if err != nil || code != 204 {
			return fmt.Errorf("subscribe %s to %s: %d %s %v", g, q.Name, code, raw, err)
		}
	}
	return nil
}

func (r *runner) brokerFor(c *client) (int, bool) {
	for i := 0; i < r.o.Brokers; i++ {
		b := (c.broker + i) % r.o.Brokers
		if r.cluster.Up(b) {
			return b, true
		}
	}
	return 0, false
}

// step performs one seeded workload operation as client c.
func (r *runner) step(rng *rand.Rand, c *client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pick := rng.IntN
	b, ok := r.brokerFor(c)
	if !ok {
		return
	}
	w := r.o.Weights
	total := w.Push + w.Pop + w.Ack + w.Extend + w.Txn + w.Abandon + w.Foreign + w.Leave + w.Stream + w.Timer + w.KV
	x := pick(total)
	if x >= total-w.Timer-w.KV-w.Stream && x < total-w.Timer-w.KV {
		r.streamStep(pick, c, b)
		return
	}
	if x >= total-w.Timer-w.KV {
		r.timerStep(pick, c, b, x >= total-w.KV)
		return
	}
	switch {
	case x < w.Push && r.pg == nil && w.BurstPct > 0 && pick(100) < w.BurstPct:
		r.burst(rng, c, b, 6+pick(5))
	case x < w.Push:
		k := r.nextKey(rng)
		r.mu.Lock()
		edge := r.edges[k]
		r.mu.Unlock()
		r.act.pushEdge(r.ctx, c.id, b, k, edge)
	case x < w.Push+w.Pop:
		q := r.o.Queues[pick(len(r.o.Queues))]
		tenant := r.o.Tenants[pick(len(r.o.Tenants))]
		g := q.Groups[pick(len(q.Groups))]
		autoAck := g != QueueMode && pick(20) == 0
		batch := 1 + pick(5)
		if w.HotPct > 0 {
			// Eager consumers of one message at a time: the busy
			// partition keeps a backlog and is claimable again at once,
			// so only the claim order decides whether the others are
			// served.
			batch = 1
		}
		waitMS := 0
		if r.pg == nil && pick(100) < w.PollPct {
			// A long poll (free-running only): parked until a push
			// wakes it, through the mesh when it was made elsewhere.
			waitMS = 100 + pick(400)
		}
		pop := r.act.pop
		if r.directPop(c) {
			pop = r.act.popDirect
		}
		h := pop(r.ctx, c.id, b, tenant, q, g, batch, autoAck, waitMS)
		switch {
		case h != nil && w.HotPct > 0:
			r.edgeTxnAfterPop(c, b, h)
			r.act.ack(r.ctx, c.id, b, h, []string{"completed"})
			r.extendAfterAck(c.id, b, h)
		case h != nil:
			c.held = append(c.held, h)
			r.edgeTxnAfterPop(c, b, h)
		}
	case x < w.Push+w.Pop+w.Ack:
		if h := takeHeld(rng, c); h != nil {
			statuses := make([]string, len(h.msgs))
			for i := range statuses {
				statuses[i] = "completed"
				if pick(100) < w.FailPct {
					statuses[i] = []string{"failed", "retry"}[pick(2)]
				}
			}
			r.act.ack(r.ctx, c.id, b, h, statuses)
			r.extendAfterAck(c.id, b, h)
		}
	case x < w.Push+w.Pop+w.Ack+w.Extend:
		if len(c.held) > 0 {
			r.act.extend(r.ctx, c.id, b, c.held[pick(len(c.held))], extendSecs)
		}
	case x < w.Push+w.Pop+w.Ack+w.Extend+w.Txn:
		if h := takeHeld(rng, c); h != nil {
			k, edge := r.txnEdgeOf(r.freshKey(rng))
			r.act.txnAs(r.ctx, c.id, b, k, h, edge, "")
		}
	case x < w.Push+w.Pop+w.Ack+w.Extend+w.Txn+w.Abandon:
		if h := takeHeld(rng, c); h != nil {
			r.hist.Add(Event{Kind: KClient, What: "abandon", Client: c.id, VT: r.vt(), Lease: h.lease})
		}
	case x < w.Push+w.Pop+w.Ack+w.Extend+w.Txn+w.Abandon+w.Foreign:
		if len(c.held) > 0 {
			h := c.held[pick(len(c.held))]
			r.act.foreign(r.ctx, c.id, b, h, r.otherTenant(rng, h.tenant), pick(2) == 0)
		}
	default:
		q := r.o.Queues[pick(len(r.o.Queues))]
		tenant, g, batch := r.o.Tenants[pick(len(r.o.Tenants))], q.Groups[pick(len(q.Groups))], 1+pick(5)
		var wait time.Duration
		if r.pg == nil {
			// Free-running: the client gives up 1-20 ms in, wherever
			// the broker is (parsing, claiming, committing, answering).
			wait = time.Duration(1+pick(20)) * time.Millisecond
		}
		if w.EarlyPct > 0 && pick(100) < w.EarlyPct {
			wait = LeaveAtOnce
		}
		r.act.popLeaving(r.ctx, c.id, b, tenant, q, g, batch, wait, r.leaveAutoAck(g))
	}
}

// leaveAutoAck decides whether a leaving pop asks for autoAck
// (Weights.LeaveAutoAckPct; lockstep only, where the client leaves while
// the claim runs, before any answer could have been written). A counter
// mixed with the seed decides, not the workload's stream, so seeds
// without it draw exactly what they drew before.
func (r *runner) leaveAutoAck(g string) bool {
	if r.pg == nil || g == QueueMode || r.o.Weights.LeaveAutoAckPct == 0 {
		return false
	}
	r.leaves++
	return mix64(r.o.Seed^uint64(r.leaves)*0x9e3779b97f4a7c15)%100 < uint64(r.o.Weights.LeaveAutoAckPct)
}

// directPop decides whether a workload pop of c goes through its broker's
// consume.Consumer rather than HTTP (Weights.DirectPct). A counter of c's
// pops mixed with the seed and c decides, not the workload's stream: seeds
// without it draw exactly what they drew before, and a seed with it runs
// the same workload, only some pops the other way.
func (r *runner) directPop(c *client) bool {
	if r.o.Weights.DirectPct == 0 {
		return false
	}
	c.pops++
	x := r.o.Seed ^ uint64(c.id)<<48 ^ uint64(c.pops)*0x9e3779b97f4a7c15
	return mix64(x^0xd1ec7)%100 < uint64(r.o.Weights.DirectPct)
}

// mix64 scrambles x (splitmix64's finalizer).
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// strangerTenant is a tenant that owns nothing in any run.
const strangerTenant = "f0f0f0f0-f0f0-4f0f-8f0f-f0f0f0f0f0f0"

// otherTenant is a tenant of the run other than t, or a stranger.
func (r *runner) otherTenant(rng *rand.Rand, t string) string {
	var others []string
	for _, o := range r.o.Tenants {
		if o != t {
			others = append(others, o)
		}
	}
	if len(others) == 0 {
		return strangerTenant
	}
	return others[rng.IntN(len(others))]
}

func takeHeld(rng *rand.Rand, c *client) *held {
	if len(c.held) == 0 {
		return nil
	}
	i := rng.IntN(len(c.held))
	h := c.held[i]
	c.held = append(c.held[:i], c.held[i+1:]...)
	return h
}

func (r *runner) freshKey(rng *rand.Rand) Key {
	ti := rng.IntN(len(r.o.Tenants))
	q := r.o.Queues[rng.IntN(len(r.o.Queues))]
	p := rng.IntN(q.Partitions)
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.o.Weights.HotPct; w > 0 {
		// The first push into each tenant's queue goes to p0, so the
		// busy partition is also the oldest (the lowest id).
		started := r.hotStarted[r.o.Tenants[ti]+"/"+q.Name]
		if !started || rng.IntN(100) < w {
			p = 0
		}
		if r.hotStarted == nil {
			r.hotStarted = map[string]bool{}
		}
		r.hotStarted[r.o.Tenants[ti]+"/"+q.Name] = true
	}
	r.nextTx++
	k := Key{Tenant: r.o.Tenants[ti], Q: q.Name, P: fmt.Sprint("p", p), Txid: fmt.Sprintf("s%x-t%d-%d", r.o.Seed&0xffff, ti, r.nextTx)}
	// Some keys sit at or past the limits (the counter picks them, so
	// the seed's stream is unchanged): at the limit it is a push like
	// any other; past it the push must be refused at the edge.
	switch edge := edgeOf(r.nextTx); edge {
	case "":
	case edgeAtLimit:
		k.Txid = atLimit(k.Txid, r.o.Seed, r.nextTx)
	default:
		k = pastLimit(k, edge, r.o.Seed, r.nextTx)
		if r.edges == nil {
			r.edges = map[Key]string{}
		}
		r.edges[k] = edge
		return k // never reused: it is never stored
	}
	r.pushed = append(r.pushed, k)
	return k
}

// burst sends n fresh pushes to broker b at once, each its own request:
// the ones that arrive while a push statement runs wait in the broker's
// combiner and go to PostgreSQL together. The keys are drawn before any
// request leaves, so the seed's stream does not depend on the machine.
func (r *runner) burst(rng *rand.Rand, c *client, b, n int) {
	c.extraOps += n - 1
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = r.freshKey(rng)
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		r.mu.Lock()
		edge := r.edges[k]
		r.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.act.pushEdge(r.ctx, c.id, b, k, edge)
		}()
	}
	wg.Wait()
}

func (r *runner) nextKey(rng *rand.Rand) Key {
	r.mu.Lock()
	if n := len(r.pushed); n > 0 && rng.IntN(100) < r.o.Weights.ReusePct {
		k := r.pushed[rng.IntN(n)]
		r.mu.Unlock()
		return k
	}
	r.mu.Unlock()
	return r.freshKey(rng)
}

func (r *runner) brokersOf(f FaultAt) []int {
	if f.Broker >= 0 {
		return []int{f.Broker % r.o.Brokers}
	}
	var out []int
	for i := 0; i < r.o.Brokers; i++ {
		out = append(out, i)
	}
	return out
}

// inject applies one scheduled fault through its injector (injectors.go)
// and records it, unless the injector records what it did itself.
func (r *runner) inject(f FaultAt) error {
	in, ok := injectors[f.Kind]
	if !ok {
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	until := r.start.Add(time.Duration(r.vt())*time.Millisecond + f.For)
	e := Event{Kind: KFault, Fault: f.Kind, Broker: f.Broker, VT: r.vt(), Until: until.Sub(r.start).Milliseconds()}
	record, err := in(r, f, &e, until)
	if err != nil || !record {
		return err
	}
	r.hist.Add(e)
	return nil
}

// noteClaim records a sweeper's claim of a timer, or its end (fired,
// failed), under the claim's token.
func (r *runner) noteClaim(b int, kind, token string, t store.ClaimedTimer) {
	r.hist.Add(Event{Kind: KSweep, What: kind, Broker: b, Tenant: t.Tenant, Txid: t.TimerKey, Lease: token, VT: r.vt()})
}

// notePopClaim records a pop's claim that began after its client had
// gone (the abandoned-claims rule's evidence); other claims are in the
// pops' own answers.
func (r *runner) notePopClaim(b int, c httpapi.PopClaim) {
	if c.ClientGone {
		r.hist.Add(Event{Kind: KClaim, What: "client-gone", Broker: b, Tenant: c.Tenant, Queue: c.Queue, Lease: c.LeaseID, VT: r.vt()})
	}
}

// encryptQueue turns encryption on for the run's first queue, every
// tenant, through one broker (the others learn of it only by the mesh, if
// at all), and notes when the configure committed, in database time.
func (r *runner) encryptQueue(f FaultAt) error {
	b := max(f.Broker, 0)
	q := r.o.Queues[0]
	body, _ := json.Marshal(map[string]any{"queue": q.Name, "options": map[string]any{"encryptionEnabled": true}})
	for _, t := range r.o.Tenants {
		code, raw, err := r.cluster.Do(r.ctx, b, "POST", "/api/v1/configure", t, body)
		if err != nil || code != 200 {
			// An outage (or a stopped broker) refuses the configure:
			// nothing is turned on, so nothing is judged sealed.
			r.starved = append(r.starved, fmt.Sprintf("queue.encrypt at=%v broker=%d: the configure answered %d %s %v", f.At, b, code, clip(raw), err))
			continue
		}
		at := time.Now()
		if r.pg != nil {
			at = r.pg.Now()
		} else if br := r.cluster.Broker(b); br != nil {
			_ = br.Store().Pool().QueryRow(r.ctx, `SELECT clock_timestamp()`).Scan(&at)
		}
		if r.sealedSince == nil {
			r.sealedSince = map[[2]string]time.Time{}
		}
		r.sealedSince[[2]string{t, q.Name}] = at
		r.fired["queue.encrypt"]++
		r.noteQueue(t, q.Name, append(q.options(), "encrypted"))
	}
	return nil
}

func (r *runner) startBroker(b int) error {
	if r.cluster.Up(b) {
		return nil
	}
	if err := r.cluster.Start(r.ctx, b); err != nil {
		return err
	}
	r.hist.Add(Event{Kind: KBroker, What: "start", Broker: b, VT: r.vt()})
	return nil
}

func (r *runner) expireFaults(now time.Time) {
	kept := r.active[:0]
	for _, a := range r.active {
		if now.Before(a.until) {
			kept = append(kept, a)
			continue
		}
		r.clear(a)
	}
	r.active = kept
}

// clear ends one database fault on its broker's path.
func (r *runner) clear(a activeFault) {
	if a.kind == "sweeper.stall" {
		r.cluster.Stall(a.broker, 0)
		return
	}
	if a.kind == "pg.hold" {
		r.cluster.Proxy(a.broker).SetHold(0)
		return
	}
	if a.kind == "pg.readonly" {
		// The address is writable again; the read-only sessions
		// already open stay so until the broker drops them itself.
		r.cluster.Proxy(a.broker).SetReadOnly(false)
		return
	}
	r.cluster.Proxy(a.broker).SetMode(faults.Pass, 0)
	r.cluster.ResetPool(a.broker)
}

// heal clears every fault, restarts crashed brokers and lets consumers go:
// whatever they still hold is abandoned and must come back after its lease.
func (r *runner) heal() error {
	r.jobs.Wait()
	if n := r.doublePass.Swap(0); n > 0 {
		r.fired["leader.double"] += int(n)
	}
	if n := r.doubleRows.Swap(0); n > 0 {
		r.fired["leader.double.deleted"] += int(n)
	}
	if n := r.leaderKills.Swap(0); n > 0 {
		r.fired["leader.killed"] += int(n)
	}
	r.endCuts()
	if n := r.lead.fired.Swap(0); n > 0 {
		r.fired["leader.cut"] += int(n)
	}
	if n := r.wakeProbes.Swap(0); n > 0 {
		r.fired["wake.probe"] += int(n)
	}
	if n := r.recreateProbes.Swap(0); n > 0 {
		r.fired["queue.recreate"] += int(n)
	}
	if n := r.rowLocks.Swap(0); n > 0 {
		r.fired["pg.rowlock"] += int(n)
	}
	if n := r.staleProbes.Swap(0); n > 0 {
		r.fired["cache.stale"] += int(n)
	}
	r.pmu.Lock()
	r.starved = append(r.starved, r.probeStarved...)
	r.probeStarved = nil
	r.pmu.Unlock()
	for _, a := range r.active {
		r.clear(a)
	}
	r.active = nil
	for b := 0; b < r.o.Brokers; b++ {
		if err := r.startBroker(b); err != nil {
			return err
		}
	}
	for _, c := range r.clients {
		r.abandonAll(c)
	}
	return nil
}

// abandonAll records that c walked away from everything it holds.
func (r *runner) abandonAll(c *client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.held {
		r.hist.Add(Event{Kind: KClient, What: "abandon", Client: c.id, VT: r.vt(), Lease: h.lease})
	}
	c.held = nil
	c.streams = nil // their leases run out; the next pop replays them
}

// drain consumes and completes everything left, in every group of every
// queue of every tenant, moving virtual time past leases when it finds
// nothing, until two consecutive passes find nothing.
func (r *runner) drain() {
	// A lease can outlive leaseTime by a renewal (extendSecs), so an empty
	// pass waits out the longer of the two before concluding.
	maxLease := 0
	if r.o.Weights.Extend > 0 {
		maxLease = extendSecs
	}
	for _, q := range r.o.Queues {
		maxLease = max(maxLease, q.LeaseSecs)
	}
	deadline := r.vt() + (r.o.Converge + 10*time.Duration(maxLease)*time.Second).Milliseconds()
	for empty := 0; empty < 2 && r.vt() < deadline; {
		got := false
		for _, t := range r.o.Tenants {
			for _, q := range r.o.Queues {
				for _, g := range q.Groups {
					for i := 0; i < 1000; i++ {
						h := r.act.pop(r.ctx, 0, 0, t, q, g, 100, false, 0)
						if h == nil {
							break
						}
						got = true
						statuses := make([]string, len(h.msgs))
						for i := range statuses {
							statuses[i] = "completed"
						}
						r.act.ack(r.ctx, 0, 0, h, statuses)
					}
				}
			}
		}
		got = r.drainLate() || got
		if got {
			empty = 0
			continue
		}
		empty++
		r.wait(time.Duration(maxLease+1) * time.Second)
	}
}

// finalRowsSQL reads every stored message, with the groups whose cursor
// is past it and the groups that dead-lettered it.
const finalRowsSQL = `
		SELECT q.tenant_id::text, q.name, p.name, m.transaction_id, count(*) OVER (PARTITION BY q.tenant_id, q.name, p.name, m.transaction_id),
			array(SELECT pc.consumer_group FROM queen.partition_consumers pc
				WHERE pc.partition_id = p.id AND pc.last_consumed_seq >= m.seq ORDER BY 1),
			array(SELECT d.consumer_group FROM queen.dead_letter_queue d WHERE d.message_id = m.id ORDER BY 1),
			CASE WHEN q.name = $1 THEN (extract(epoch FROM m.created_at) * 1000)::bigint ELSE 0 END
		FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		ORDER BY 1, 2, 3, 4`

// finalRead records every stored message, with the groups whose cursor is
// past it and the groups that dead-lettered it.
// more, when set, adds to the final event what other databases hold.
func finalRead(ctx context.Context, dsn string, h *History, vt int64, dbNow *time.Time, sealed map[[2]string]time.Time, quarantined []Quarantined,
	more func(*Event) error) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, finalRowsSQL, TimerQueue)
	if err != nil {
		return fmt.Errorf("final read: %w", err)
	}
	final := Event{Kind: KFinal, VT: vt, Quarantined: quarantined}
	for rows.Next() {
		var row Row
		if err := rows.Scan(&row.Tenant, &row.Queue, &row.Partition, &row.Txid, &row.Count, &row.DoneBy, &row.DLQBy, &row.At); err != nil {
			return err
		}
		final.Rows = append(final.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if final.Timers, final.DBNow, err = pendingTimers(ctx, conn, dbNow); err != nil {
		return err
	}
	if final.StreamState, final.StreamSink, err = readStreams(ctx, conn); err != nil {
		return err
	}
	if final.Plain, err = plainRows(ctx, conn, sealed); err != nil {
		return err
	}
	if final.Twice, err = twiceRows(ctx, conn, sealed); err != nil {
		return err
	}
	if more != nil {
		if err := more(&final); err != nil {
			return err
		}
	}
	h.Add(final)
	return nil
}

// plainRows reads the rows stored in the clear in a queue after its
// encryption was turned on (queue.encrypt): a push whose statement started
// after that commit must have been sealed, whatever the broker cached.
func plainRows(ctx context.Context, conn *pgx.Conn, sealed map[[2]string]time.Time) ([]Key, error) {
	var out []Key
	for tq, since := range sealed {
		rows, err := conn.Query(ctx, `SELECT p.name, m.transaction_id FROM queen.messages m
			JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.tenant_id = $1 AND q.name = $2 AND NOT m.is_encrypted AND m.created_at > $3 ORDER BY 1, 2`, tq[0], tq[1], since)
		if err != nil {
			return nil, fmt.Errorf("final read: %w", err)
		}
		for rows.Next() {
			k := Key{Tenant: tq[0], Q: tq[1]}
			if err := rows.Scan(&k.P, &k.Txid); err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, k)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// pendingTimers reads the timers not fired yet, and the database's now.
func pendingTimers(ctx context.Context, conn *pgx.Conn, dbNow *time.Time) ([]PendingTimer, int64, error) {
	var now int64
	if err := conn.QueryRow(ctx, `SELECT (extract(epoch FROM coalesce($1::timestamptz, now())) * 1000)::bigint`, dbNow).Scan(&now); err != nil {
		return nil, 0, fmt.Errorf("final read: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT tenant_id::text, timer_key, (extract(epoch FROM deliver_at) * 1000)::bigint
		FROM queen.log_timers ORDER BY 1, 2`)
	if err != nil {
		return nil, 0, fmt.Errorf("final read: %w", err)
	}
	var out []PendingTimer
	for rows.Next() {
		var t PendingTimer
		if err := rows.Scan(&t.Tenant, &t.Key, &t.At); err != nil {
			return nil, 0, err
		}
		out = append(out, t)
	}
	return out, now, rows.Err()
}

// settleTimers lets the sweepers fire every pending timer after the heal
// (the workload's are at most 3 s ahead), waiting out the claims of brokers
// that died holding some (their lease), within the convergence bound.
func (r *runner) settleTimers(dsn string) error {
	if r.o.Weights.Timer == 0 {
		return nil
	}
	conn, err := pgx.Connect(r.ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(r.ctx)
	deadline := r.vt() + (3*time.Second + SweeperLease + r.o.Converge).Milliseconds()
	for r.vt() < deadline {
		var pending int
		// A failed timer (a poison one, given up) is never claimed again.
		if err := conn.QueryRow(r.ctx, `SELECT count(*) FROM queen.log_timers WHERE claimed_until IS DISTINCT FROM 'infinity'`).Scan(&pending); err != nil {
			return err
		}
		if pending == 0 {
			return nil
		}
		if r.pg != nil {
			r.pg.Advance(100 * time.Millisecond)
			r.stepServices()
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}
