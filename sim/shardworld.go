package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/catalog"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/mover"
	"github.com/queen-go/queen/queen/shards"
	"github.com/queen-go/queen/queen/store"
)

// ShardWorld is a world with shards (design-shards.md, "Testing on a
// small machine"): a catalogue and shards s0 and s1, migrated databases of
// one cluster at wal_level=logical (a move's copy is logical
// replication). Each is a postgres:// URL.
type ShardWorld struct {
	Catalog, S0, S1 string
}

// MoveSpec is the move of a run's queue from s0 to s1: planned after
// operation At, then each later operation is followed by the move's next
// step with StepPct percent odds (from the seed, apart from the
// workload's stream), as other background services run in seeded order.
// The steps left when the operations end run before the final read.
//
// CrashPct is the odds (percent, from the same stream) that the mover is
// killed at each point of Config.AfterEffect (after a step's effect and
// before its state write, and inside the activation and the rollback), at
// most once per point: the runner then starts a new mover, as a restarted
// broker's, on new pools, whose first step, at once, reruns the one that
// died from the state the catalogue kept (invariant 9). Each kill is a
// move.crashed fault in the history.
type MoveSpec struct {
	Queue    string // a queue of Options.Queues, of the first tenant
	At       int
	StepPct  int
	CrashPct int
}

// FMoveCrashed is the fault of the runner's mover killed at a point (What)
// of a move's step. Only the mover dies: the brokers see nothing of it, so
// it excuses no answer (benign).
const FMoveCrashed = "move.crashed"

// errMoverKilled is what the runner's AfterEffect answers to kill its mover.
var errMoverKilled = errors.New("sim: the mover was killed")

// RunSharded runs o in world w: the brokers route by the catalogue, the
// first shard's database reached through their proxies as Run's dsn, and
// o.Move moves a queue while the operations run. Lockstep only.
func RunSharded(ctx context.Context, w ShardWorld, o Options, log io.Writer) (*Result, error) {
	o.defaults()
	if o.Mode == "free" {
		return nil, fmt.Errorf("sim: a shard world runs lockstep only")
	}
	return runLockstep(ctx, w.S0, &w, o, log)
}

// config is the brokers' shards configuration; none without a world.
func (w *ShardWorld) config() shards.Config {
	if w == nil {
		return shards.Config{}
	}
	cfg, err := shards.Parse(w.Catalog, "s0="+w.S0+";s1="+w.S1, "")
	if err != nil {
		panic(fmt.Sprintf("sim: shard world: %v", err)) // the harness's URLs
	}
	return cfg
}

// moveRun is the runner's mover (the one broker that runs the move; the
// others, and this one's placement cache, learn of it by the fence) and
// the move's progress.
type moveRun struct {
	spec  MoveSpec
	rng   *rand.Rand
	pools []*pgxpool.Pool // the catalogue, s0, s1
	mover *mover.Mover
	// killed are the points the mover was killed at (once each), and
	// killedAt the last one, until the runner restarts the mover.
	killed   map[string]bool
	killedAt string
	// replans counts the plans again of a move that failed by
	// replanReason.
	replans int
	id      string
	state   string
	tenant  string
	// frozenAt is when the freeze committed (virtual ms), until the
	// activation or the rollback ends it; -1 outside.
	frozenAt int64
}

// openMove opens the mover's pools on the world, when the run moves.
func (r *runner) openMove() error {
	if r.world == nil || r.o.Move == nil {
		return nil
	}
	r.move = &moveRun{spec: *r.o.Move, rng: rand.New(rand.NewPCG(r.o.Seed, 0x5a4d0e)), tenant: r.o.Tenants[0], frozenAt: -1,
		killed: map[string]bool{}}
	return r.startMover()
}

// startMover opens pools on the world and a mover over them: the runner's
// at the start, and a restarted broker's after the mover was killed.
func (r *runner) startMover() error {
	m := r.move
	m.pools = nil
	for _, url := range []string{r.world.Catalog, r.world.S0, r.world.S1} {
		p, err := pgxpool.New(r.ctx, url)
		if err != nil {
			r.closeMove()
			return fmt.Errorf("sim: mover pool: %w", err)
		}
		m.pools = append(m.pools, p)
	}
	shard := func(i int, url string) mover.Shard {
		return mover.Shard{Pool: m.pools[i], ConnInfo: url,
			Store: store.New(m.pools[i], store.Options{IDs: ids.NewSource(clock.Real{}, nil)})}
	}
	// The mover's waits are for replication, real work: real time.
	m.mover = mover.New(mover.Config{Catalog: catalog.New(m.pools[0], r.world.config()), CatalogPool: m.pools[0],
		Shards: map[string]mover.Shard{"s0": shard(1, r.world.S0), "s1": shard(2, r.world.S1)},
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock.Real{}, Poll: 10 * time.Millisecond,
		CatchUpTimeout: time.Minute, AfterEffect: m.kill})
	return nil
}

// kill is the mover's AfterEffect: it dies at point with the spec's odds,
// once per point. No draw without odds, so a move without kills steps as
// before they existed.
func (m *moveRun) kill(point string) error {
	if m.spec.CrashPct <= 0 || m.killed[point] || m.rng.IntN(100) >= m.spec.CrashPct {
		return nil
	}
	m.killed[point], m.killedAt = true, point
	return fmt.Errorf("%w at %s", errMoverKilled, point)
}

// restartMover records the mover's death at m.killedAt and starts a new
// one, whose next step reruns the step that died. A kill after the
// freeze's effect begins the freeze's pause; one after the activation's
// (the catalogue names the destination) ends it.
func (r *runner) restartMover() error {
	m := r.move
	point := m.killedAt
	m.killedAt = ""
	r.hist.Add(Event{Kind: KFault, Fault: FMoveCrashed, What: point, Broker: -1, VT: r.vt(), Until: r.vt()})
	r.fired[FMoveCrashed]++
	r.fired[FMoveCrashed+"."+point]++
	switch {
	case point == mover.StateFreeze && m.frozenAt < 0:
		m.frozenAt = r.vt()
	case point == mover.StateActivate && m.frozenAt >= 0:
		r.hist.Add(Event{Kind: KFault, Fault: "move.frozen", Broker: -1, VT: m.frozenAt, Until: r.vt()})
		m.frozenAt = -1
	}
	r.closeMove()
	return r.startMover()
}

// closeMove closes the mover's pools.
func (r *runner) closeMove() {
	if r.move == nil {
		return
	}
	for _, p := range r.move.pools {
		p.Close()
	}
	r.move.pools = nil
}

// stepMove plans the move after operation At, then runs its next step
// when the seed says so.
func (r *runner) stepMove(i int) error {
	m := r.move
	switch {
	case m == nil || m.state == mover.StateDone || m.state == mover.StateFailed:
		return nil
	case m.id == "":
		if i < m.spec.At {
			return nil
		}
		return r.planMove()
	case m.rng.IntN(100) < m.spec.StepPct:
		return r.moveStep()
	}
	return nil
}

// planMove plans the move of the spec's queue to s1.
func (r *runner) planMove() error {
	m := r.move
	id, err := m.mover.Plan(r.ctx, m.tenant, m.spec.Queue, "s1")
	if err != nil {
		return fmt.Errorf("sim: plan the move: %w", err)
	}
	m.id, m.state = id, mover.StatePlan
	r.fired["move.planned"]++
	return nil
}

// replanReason is the reason of a move that failed by a known constraint
// (SPEC, "Shards": a partition created during the copy fails the move;
// plan it again): the workload creates a queue's partitions by its first
// push to each, which may come during the copy.
const replanReason = "created during the copy"

// maxReplans bounds the plans again of a run's move.
const maxReplans = 2

// replan forgets a move that failed by replanReason, so that the next
// operation (or finishMove) plans it again, as SPEC tells an operator.
func (r *runner) replan(reason string) {
	m := r.move
	if !strings.Contains(reason, replanReason) || m.replans == maxReplans {
		return
	}
	m.id, m.state = "", ""
	m.replans++
	r.fired["move.replanned"]++
}

// moveStep runs the move's next step and records the state it reached,
// restarting the mover each time it was killed in it.
func (r *runner) moveStep() error {
	m := r.move
	err := m.mover.Step(r.ctx, m.id)
	for errors.Is(err, errMoverKilled) && m.killedAt != "" {
		// A restarted broker's mover resumes at once: its first step
		// reruns the one that died, before any broker reads the catalogue
		// again.
		if err := r.restartMover(); err != nil {
			return err
		}
		err = m.mover.Step(r.ctx, m.id)
	}
	if err != nil {
		return fmt.Errorf("sim: move %s at %s: %w", m.id, m.state, err)
	}
	st, err := m.mover.Get(r.ctx, m.id)
	if err != nil {
		return fmt.Errorf("sim: move %s: %w", m.id, err)
	}
	if st.State == mover.StateCatchUp && m.frozenAt < 0 {
		m.frozenAt = r.vt() // unless a mover killed after the freeze's effect began it
	}
	if m.frozenAt >= 0 && st.State != mover.StateCatchUp && st.State != mover.StateActivate {
		// The freeze's pause is over: a push of the moving queue may
		// answer 503 (moving, retry) within it, as within a fault's.
		r.hist.Add(Event{Kind: KFault, Fault: "move.frozen", Broker: -1, VT: m.frozenAt, Until: r.vt()})
		m.frozenAt = -1
	}
	m.state = st.State
	r.fired["move."+st.State]++
	if st.State == mover.StateFailed {
		// Said with the missing move.done.
		r.starved = append(r.starved, "the move failed: "+st.Reason)
		r.replan(st.Reason)
	}
	return nil
}

// finishMove runs the steps the operations left, before the drain.
func (r *runner) finishMove() error {
	m := r.move
	if m == nil || (m.id == "" && m.replans == 0) {
		return nil
	}
	for n := 0; m.state != mover.StateDone && m.state != mover.StateFailed; n++ {
		if n == 20 {
			return fmt.Errorf("sim: move %s still at %s after 20 steps", m.id, m.state)
		}
		step := r.moveStep
		if m.id == "" {
			step = r.planMove // replanned
		}
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// finalShardRead adds s1's message rows to the final read (finalRead
// read s0's) and the moved queue's rows found on both shards.
func (r *runner) finalShardRead(final *Event) error {
	if r.move == nil {
		return nil
	}
	more, err := shardRows(r.ctx, r.move.pools[2])
	if err != nil {
		return err
	}
	final.Rows = append(final.Rows, more...)
	sort.SliceStable(final.Rows, func(i, j int) bool { return rowLess(final.Rows[i], final.Rows[j]) })
	final.Overlap, err = overlap(r.ctx, r.move.pools[1], r.move.pools[2], r.move.tenant, r.move.spec.Queue)
	return err
}

// rowLess is the final read's order: tenant, queue, partition, txid.
func rowLess(a, b Row) bool {
	if a.Tenant != b.Tenant {
		return a.Tenant < b.Tenant
	}
	if a.Queue != b.Queue {
		return a.Queue < b.Queue
	}
	if a.Partition != b.Partition {
		return a.Partition < b.Partition
	}
	return a.Txid < b.Txid
}

// shardRows reads a shard's messages as finalRead does.
func shardRows(ctx context.Context, pool *pgxpool.Pool) ([]Row, error) {
	rows, err := pool.Query(ctx, finalRowsSQL, TimerQueue)
	if err != nil {
		return nil, fmt.Errorf("final read of s1: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var row Row
		if err := rows.Scan(&row.Tenant, &row.Queue, &row.Partition, &row.Txid, &row.Count, &row.DoneBy, &row.DLQBy, &row.At); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// queueRowsSQL is a queue's messages on one shard, by id and by
// (partition, seq), and whether the shard's queue row is a tombstone (a
// negative epoch and no partitions: store.MoveQueue.Tombstone).
const queueRowsSQL = `SELECT 'id ' || m.id::text, 'seq ' || p.name || '/' || m.seq::text
FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
WHERE q.tenant_id = $1::uuid AND q.name = $2`

// overlap is the queue's rows (a message id, or a partition's seq) on both
// shards, unless the source's queue row is a tombstone: committed rows of
// one partition live on one shard at a time.
func overlap(ctx context.Context, src, dst *pgxpool.Pool, tenant, queue string) ([]string, error) {
	mq, found, err := store.New(src, store.Options{}).MoveQueue(ctx, src, tenant, queue)
	if err != nil || (found && mq.Tombstone()) {
		return nil, err
	}
	on := func(pool *pgxpool.Pool) (map[string]bool, error) {
		rows, err := pool.Query(ctx, queueRowsSQL, tenant, queue)
		if err != nil {
			return nil, fmt.Errorf("overlap read: %w", err)
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var id, seq string
			if err := rows.Scan(&id, &seq); err != nil {
				return nil, err
			}
			out[id], out[seq] = true, true
		}
		return out, rows.Err()
	}
	a, err := on(src)
	if err != nil {
		return nil, err
	}
	b, err := on(dst)
	if err != nil {
		return nil, err
	}
	var both []string
	for k := range a {
		if b[k] {
			both = append(both, k)
		}
	}
	sort.Strings(both)
	return both, nil
}
