package sim

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// leaderPasses numbers the leader passes of a run and holds the cuts still
// to make (leader.cut).
type leaderPasses struct {
	mu     sync.Mutex
	n      int // passes so far
	cuts   int // passes still to cut at their start
	broker int // whose passes: -1 any
	// fired counts the sessions cut (a cut that could not be made is
	// reported as starved).
	fired atomic.Int64
}

// cutPasses arms leader.cut: the lock sessions of the next f.Count leader
// passes (of broker f.Broker, or any) are terminated from the outside as
// the passes start, after the lock is taken and before any statement of
// theirs. Every statement of such a pass must then fail; a pass that
// ends without error acted without its lock.
func (r *runner) cutPasses(f FaultAt) {
	r.lead.mu.Lock()
	defer r.lead.mu.Unlock()
	r.lead.cuts += max(f.Count, 1)
	r.lead.broker = f.Broker
}

// noteLeaderPass records the start of a leader pass of broker b on the
// lock session, cuts that session first when leader.cut says so, and
// returns what records the pass's end.
func (r *runner) noteLeaderPass(b int, role string, session uint32) func(error) {
	r.lead.mu.Lock()
	r.lead.n++
	pass := r.lead.n
	cut := r.lead.cuts > 0 && (r.lead.broker < 0 || r.lead.broker%r.o.Brokers == b)
	if cut {
		r.lead.cuts--
	}
	r.lead.mu.Unlock()
	r.hist.Add(Event{Kind: KLeader, What: "start", Broker: b, Role: role, Session: session, Pass: pass, VT: r.vt()})
	if cut {
		if err := r.cluster.terminateSession(r.ctx, session); err != nil {
			r.pmu.Lock()
			r.probeStarved = append(r.probeStarved, fmt.Sprintf("leader.cut of pass %d: %v", pass, err))
			r.pmu.Unlock()
		} else {
			r.lead.fired.Add(1)
			r.hist.Add(Event{Kind: KLeader, What: "cut", Broker: b, Role: role, Session: session, Pass: pass, VT: r.vt()})
		}
	}
	return func(err error) {
		e := Event{Kind: KLeader, What: "end", Broker: b, Role: role, Session: session, Pass: pass, VT: r.vt()}
		if err != nil {
			e.Err = "failed" // lockstep: the same in every replay
			if r.pg == nil {
				e.Err = clip([]byte(err.Error()))
			}
		}
		r.hist.Add(e)
	}
}

// noteKills records the sessions leader.kill terminated (free-running).
func (r *runner) noteKills(pids []uint32) {
	for _, pid := range pids {
		r.hist.Add(Event{Kind: KLeader, What: "cut", Session: pid, VT: r.vt()})
	}
}

// endCuts disarms the cuts not made by the heal: they are reported as
// starved.
func (r *runner) endCuts() {
	r.lead.mu.Lock()
	defer r.lead.mu.Unlock()
	if r.lead.cuts > 0 {
		r.starved = append(r.starved, fmt.Sprintf("leader.cut: %d pass(es) never started to be cut", r.lead.cuts))
	}
	r.lead.cuts = 0
}

// terminateSession ends backend pid from an outside session and returns
// once it is gone.
func (c *Cluster) terminateSession(ctx context.Context, pid uint32) error {
	conn, err := pgx.Connect(ctx, c.opts.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var gone bool
	// With a timeout, pg_terminate_backend waits for the backend to exit.
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, int32(pid)).Scan(&gone); err != nil {
		return err
	}
	if !gone {
		return fmt.Errorf("backend %d did not exit", pid)
	}
	return nil
}

// killLockSessions ends every session holding an advisory lock in the
// run's database but the migration lock's, and returns their pids.
func (c *Cluster) killLockSessions(ctx context.Context) ([]uint32, error) {
	conn, err := pgx.Connect(ctx, c.opts.DSN)
	if err != nil {
		return nil, fmt.Errorf("leader.kill: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT t.pid FROM (SELECT DISTINCT l.pid FROM pg_locks l
		JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.datname = $1 AND l.objid <> 737000) t
		WHERE pg_terminate_backend(t.pid, 10000) ORDER BY 1`, c.dbName())
	if err != nil {
		return nil, err
	}
	var pids []uint32
	for rows.Next() {
		var pid int32
		if err := rows.Scan(&pid); err != nil {
			rows.Close()
			return nil, err
		}
		pids = append(pids, uint32(pid))
	}
	return pids, rows.Err()
}
