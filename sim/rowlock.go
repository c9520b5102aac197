package sim

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// FRowLockHeld is the fault event of a row lock an outside session held
// (pg.rowlock): VT when it was granted, Until when it was let go, the
// locked partition's key, What "partition" or "cursor" (G the cursor's
// group).
const FRowLockHeld = "pg.rowlock.held"

// rowLockBoundMS is how long a push or ack of another partition may take,
// when invoked while a row was held locked, if it answered only once the
// lock was let go: what a combined statement waiting on the lock costs the
// requests it carried. Generous against a loaded machine's latency, well
// short of the hold (the generator's holds are 1.5-1.8 s, under the
// simulated brokers' 2 s statement timeout, so a stalled request waits
// for the release, not for its timeout).
const rowLockBoundMS = 1000

// holdRow (pg.rowlock, free-running) is an outside session, as an
// operator's psql or a runaway job would be, holding one row of the run's
// first tenant and queue FOR UPDATE for f.For: partition p0's row, or
// (Count 1) its queue-mode cursor row. Only that partition's writers may
// wait for it; the row-lock rule judges everyone else's pushes and acks.
func (r *runner) holdRow(f FaultAt) {
	what := "partition"
	if f.Count == 1 {
		what = "cursor"
	}
	e := Event{Kind: KFault, Fault: FRowLockHeld, What: what, Tenant: r.o.Tenants[0], Queue: r.o.Queues[0].Name, Partition: "p0"}
	if what == "cursor" {
		e.Group = QueueMode
	}
	ctx, cancel := context.WithTimeout(r.ctx, f.For+rowWait+10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.cluster.DSN())
	if err != nil {
		r.starveRowLock(f, err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	lock := `SELECT count(*) FROM (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.tenant_id = $1 AND q.name = $2 AND p.name = $3 FOR UPDATE OF p) t`
	if what == "cursor" {
		lock = `SELECT count(*) FROM (SELECT 1 FROM queen.partition_consumers pc JOIN queen.partitions p ON p.id = pc.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.tenant_id = $1 AND q.name = $2 AND p.name = $3 AND pc.consumer_group = $4 FOR UPDATE OF pc) t`
	}
	// A cursor row's lock bites acks: the session holds one batch of the
	// partition's, popped just before, whose ack goes in while the row
	// is held (it may wait; the acks of every other cursor may not).
	var h, other *held
	hb := 0
	if what == "cursor" {
		h, hb = r.popPartition(e.Tenant, r.o.Queues[0], e.Partition, -1)
		other, _ = r.popPartition(e.Tenant, r.o.Queues[0], "p1", hb)
	}
	if what == "cursor" && h == nil {
		r.starveRowLock(f, fmt.Errorf("partition %s had no message to hold an ack of", e.Partition))
	}
	// The row exists once the workload pushed (or popped) it: wait for
	// that, within rowWait.
	for waited := time.Now(); ; {
		tx, err := conn.Begin(ctx)
		if err != nil {
			r.starveRowLock(f, err)
			return
		}
		var n int
		args := []any{e.Tenant, e.Queue, e.Partition}
		if what == "cursor" {
			args = append(args, QueueMode)
		}
		if err := tx.QueryRow(ctx, lock, args...).Scan(&n); err != nil || n == 0 {
			_ = tx.Rollback(ctx)
			if err == nil && time.Since(waited) < rowWait {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			r.starveRowLock(f, fmt.Errorf("no %s row to lock (%v)", what, err))
			return
		}
		e.VT = r.vt()
		var wg sync.WaitGroup
		if what == "cursor" {
			r.ackUnderLock(&wg, hb, h, other)
		} else {
			r.pushUnderLock(&wg, e)
		}
		time.Sleep(f.For)
		e.Until = r.vt()
		_ = tx.Rollback(ctx)
		wg.Wait()
		break
	}
	r.rowLocks.Add(1)
	r.hist.Add(e)
}

// rowWait bounds the wait for the row to lock to exist. A second was
// too short on a busy machine: with the database slowed and reset early in
// a run, every push of the first seconds is buffered and the partition row
// comes with the spool's replay, so the fault starved and the run failed
// its coverage (free seed 0x8c4bbe8cd99e523b, CI at load 10).
const rowWait = 10 * time.Second

// underLockPushes is how many pushes into the locked partition each
// broker is sent at once while the row is held: more than the simulated
// brokers' push statements in flight (4), so a combiner that lets a
// statement wait for the lock has every slot taken by one.
const underLockPushes = 6

// pushUnderLock sends, through every broker up, underLockPushes pushes
// into the locked partition at once (they may wait for the lock), and
// then, one after another, three pushes into another partition of the
// same queue (they may not): client 0's, recorded like any.
func (r *runner) pushUnderLock(wg *sync.WaitGroup, l Event) {
	for b := 0; b < r.o.Brokers; b++ {
		if !r.cluster.Up(b) {
			continue
		}
		for i := 0; i < underLockPushes; i++ {
			k := Key{Tenant: l.Tenant, Q: l.Queue, P: l.Partition, Txid: fmt.Sprintf("s%x-locked-b%d-%d-%d", r.o.Seed&0xffff, b, l.VT, i)}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.act.push(r.ctx, 0, b, k)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				time.Sleep(100 * time.Millisecond)
				r.act.push(r.ctx, 0, b, Key{Tenant: l.Tenant, Q: l.Queue, P: "p1", Txid: fmt.Sprintf("s%x-unlocked-b%d-%d-%d", r.o.Seed&0xffff, b, l.VT, i)})
			}
		}()
	}
}

// ackUnderLock acks h (a message of the locked cursor's partition: it may
// wait for the lock) through broker b, and a moment later other (one of
// another partition: it may not).
func (r *runner) ackUnderLock(wg *sync.WaitGroup, b int, h, other *held) {
	for i, x := range []*held{h, other} {
		if x == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 100 * time.Millisecond)
			r.act.ack(r.ctx, 0, b, x, []string{"completed"})
		}()
	}
}

// popPartition pops one message of one partition in queue mode, under a
// lease, through broker only (or, when only is -1, the first broker up),
// recorded as client 0's.
func (r *runner) popPartition(tenant string, q QueueSpec, p string, only int) (*held, int) {
	for b := 0; b < r.o.Brokers; b++ {
		if !r.cluster.Up(b) || (only >= 0 && b != only) {
			continue
		}
		// One message at least to pop (any of the partition's may come).
		r.act.push(r.ctx, 0, b, Key{Tenant: tenant, Q: q.Name, P: p, Txid: fmt.Sprintf("s%x-held-%s-%d", r.o.Seed&0xffff, p, r.vt())})
		call := r.hist.Invoke(Event{Op: "pop", Broker: b, VT: r.vt(), Tenant: tenant, Queue: q.Name, LeaseSecs: q.LeaseSecs})
		code, raw, err := r.cluster.Do(r.ctx, b, "GET", "/api/v1/pop/queue/"+url.PathEscape(q.Name)+"/partition/"+url.PathEscape(p)+"?batch=1", tenant, nil)
		return r.act.finishPop(call, b, code, raw, err, tenant, q, "", false), b
	}
	return nil, 0
}

func (r *runner) starveRowLock(f FaultAt, err error) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	r.probeStarved = append(r.probeStarved, fmt.Sprintf("pg.rowlock at=%v: %v", f.At, err))
}

// CheckRowLocks: a row held locked by an outside session (pg.rowlock)
// delays that row's writers only. A push to another partition, or an ack
// of no message of the locked partition (of its group, for a cursor row),
// invoked while the row was held, must not answer only after the lock was
// let go, having taken longer than rowLockBoundMS: it was made to wait
// behind a statement that waited for the lock (one combined statement at
// a time, every request behind it).
//
// A call through a broker whose database link was slowed or cut meanwhile
// (slowedBy) is not judged: its wait has another cause. A free seed that
// held p0 while pg.delay slowed broker 0 for 3 s had pushes of broker 0
// answer 2.5 s after they were invoked, before the hold and after it alike.
func CheckRowLocks(h []Event, _ Spec) []Violation {
	var out []Violation
	slowed := slowedBy(h)
	for _, l := range h {
		if l.Kind != KFault || l.Fault != FRowLockHeld {
			continue
		}
		locked := Key{l.Tenant, l.Queue, l.Partition, ""}
		for _, c := range calls(h) {
			if c.done == nil || c.done.Kind == KInfo && c.done.Err == Cancelled || c.in.VT < l.VT || c.in.VT >= l.Until {
				continue
			}
			took := c.done.VT - c.in.VT
			if c.done.VT < l.Until || took <= rowLockBoundMS || touches(c.in, locked, l) || slowed(c.in.Broker, c.in.VT, c.done.VT) {
				continue
			}
			out = append(out, Violation{"row-lock", fmt.Sprintf("%s of %s (invoked at vt %d) answered at vt %d, %d ms later, after the %s row of %s/%s/%s held by an outside session from vt %d was let go at vt %d: it waited for another partition's lock",
				c.in.Op, opTarget(c.in), c.in.VT, c.done.VT, took, l.What, l.Tenant, l.Queue, l.Partition, l.VT, l.Until)})
		}
	}
	return limit(out, 20)
}

// touches reports whether an operation is one the lock may hold up: a
// push into the locked partition, an ack of one of its messages (in its
// group, for a cursor row), anything but a push or an ack.
func touches(in Event, locked Key, l Event) bool {
	switch in.Op {
	case "push":
		return Key{in.Tenant, in.Queue, in.Partition, ""} == locked
	case "ack":
		if in.Foreign {
			return true
		}
		for _, m := range in.Msgs {
			if (Key{m.Tenant, m.Queue, m.Partition, ""}) == locked && (l.What != "cursor" || groupOf(in.Group) == l.Group) {
				return true
			}
		}
		return false
	}
	return true
}

// opTarget names an operation's target for a violation.
func opTarget(in Event) string {
	if in.Op == "push" {
		return Key{in.Tenant, in.Queue, in.Partition, in.Txid}.String()
	}
	return fmt.Sprintf("%d message(s) of %s/%s", len(in.Msgs), in.Tenant, in.Queue)
}

// linkFaults are the faults that slow or cut a broker's database link, so
// that a request through it may wait without any lock to blame.
var linkFaults = map[string]bool{"pg.delay": true, "pg.blackhole": true, "pg.refuse": true, "pg.reset": true, "pg.readonly": true}

// slowedBy answers whether broker b's link was under a linkFaults fault
// (its own, or every broker's: Broker -1), or the broker started, stopped
// or crashed, at any instant in [from, to].
func slowedBy(h []Event) func(b int, from, to int64) bool {
	type window struct {
		b        int
		from, to int64
	}
	var ws []window
	for _, e := range h {
		switch {
		case e.Kind == KFault && linkFaults[e.Fault]:
			ws = append(ws, window{e.Broker, e.VT, max(e.Until, e.VT)})
		case e.Kind == KBroker:
			ws = append(ws, window{e.Broker, e.VT, e.VT})
		}
	}
	return func(b int, from, to int64) bool {
		for _, w := range ws {
			if (w.b == b || w.b == -1) && w.from <= to && w.to >= from {
				return true
			}
		}
		return false
	}
}
