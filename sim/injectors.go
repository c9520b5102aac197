package sim

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen/leader"
	"github.com/queen-go/queen/queen/spool"
)

// injector applies one kind of fault f at until's start (until: when a
// fault lasting f.For ends). It may adjust e, the fault event inject
// records, and answers whether to record it: a fault that records what it
// did as other events (a crash, a restart, a probe run later) answers
// false.
type injector func(r *runner, f FaultAt, e *Event, until time.Time) (record bool, err error)

// injectors are the fault kinds a scenario can schedule, by name.
var injectors = map[string]injector{
	"pg.blackhole":   (*runner).injectPGMode,
	"pg.refuse":      (*runner).injectPGMode,
	"pg.delay":       (*runner).injectPGMode,
	"pg.readonly":    (*runner).injectReadOnly,
	"pg.hold":        (*runner).injectHold,
	"pg.reset":       (*runner).injectReset,
	"pg.rowlock":     (*runner).injectRowLock,
	"broker.crash":   (*runner).injectCrash,
	"broker.stop":    (*runner).injectStop,
	"broker.start":   (*runner).injectStart,
	"clock.skew":     (*runner).injectSkew,
	"key.rotate":     (*runner).injectKeyRotate,
	"queue.encrypt":  func(r *runner, f FaultAt, _ *Event, _ time.Time) (bool, error) { return false, r.encryptQueue(f) },
	"sealed.paths":   func(r *runner, f FaultAt, _ *Event, _ time.Time) (bool, error) { return false, r.sealedPaths(f) },
	"leader.kill":    (*runner).injectLeaderKill,
	"leader.cut":     func(r *runner, f FaultAt, _ *Event, _ time.Time) (bool, error) { r.cutPasses(f); return true, nil },
	"leader.double":  (*runner).injectDoubleLeader,
	"retention.fail": (*runner).injectRetentionFail,
	"sweeper.stall":  (*runner).injectSweeperStall,
	"spool.eio":      (*runner).injectSpoolWrites,
	"spool.enospc":   (*runner).injectSpoolWrites,
	"spool.torn":     (*runner).injectSpoolWrites,
	"spool.poison":   (*runner).injectSpoolPoison,
	"spool.corrupt": func(r *runner, f FaultAt, e *Event, _ time.Time) (bool, error) {
		r.corruptSpools(f)
		e.Until = e.VT
		return true, nil
	},
	"spool.second": func(r *runner, f FaultAt, e *Event, _ time.Time) (bool, error) {
		r.secondSpool(f)
		e.Until = e.VT
		return true, nil
	},
	"mesh.drop":      (*runner).injectMesh,
	"mesh.delay":     (*runner).injectMesh,
	"mesh.reorder":   (*runner).injectMesh,
	"wake.probe":     (*runner).injectProbe,
	"queue.recreate": (*runner).injectProbe,
	"cache.stale":    (*runner).injectProbe,
}

// FaultKinds are the kinds of fault a scenario can schedule (FaultAt.Kind).
var FaultKinds = slices.Sorted(maps.Keys(injectors))

// touchHealth reaches the database through broker b's faulty path once,
// so a fault is exercised even if no client happens to use that broker
// while it lasts ("sometimes" coverage is certain).
func (r *runner) touchHealth(b int) {
	if r.cluster.Up(b) {
		_, _, _ = r.cluster.Do(r.ctx, b, "GET", "/health", "", nil)
	}
}

// injectPGMode: the broker's database path refuses, swallows or delays.
func (r *runner) injectPGMode(f FaultAt, _ *Event, until time.Time) (bool, error) {
	mode := map[string]faults.Mode{"pg.blackhole": faults.Blackhole, "pg.refuse": faults.Refuse, "pg.delay": faults.Delay}[f.Kind]
	for _, b := range r.brokersOf(f) {
		r.cluster.Proxy(b).SetMode(mode, f.By)
		r.cluster.ResetPool(b)
		r.active = append(r.active, activeFault{f.Kind, b, until})
		r.touchHealth(b)
	}
	return true, nil
}

// injectReadOnly: the broker's address moves to a read-only server (a
// standby not yet promoted): its sessions are cut, every new one refuses
// writes (25006) for For. Pushes must be buffered and nothing quarantined
// for it.
func (r *runner) injectReadOnly(f FaultAt, _ *Event, until time.Time) (bool, error) {
	r.fired["pg.readonly"]++ // its sessions count as pg.readonly.sessions
	for _, b := range r.brokersOf(f) {
		r.cluster.Proxy(b).SetReadOnly(true)
		r.active = append(r.active, activeFault{f.Kind, b, until})
		r.touchHealth(b)
	}
	return true, nil
}

// injectHold: COMMITs on the broker's database path are held up to By
// each, so transactions commit out of the order they wrote in.
func (r *runner) injectHold(f FaultAt, _ *Event, until time.Time) (bool, error) {
	for _, b := range r.brokersOf(f) {
		r.cluster.Proxy(b).SetHold(f.By)
		r.active = append(r.active, activeFault{f.Kind, b, until})
	}
	return true, nil
}

// injectReset: the broker's connections are reset. The pool keeps its
// dead connections: the next calls on them fail, as after a real reset.
func (r *runner) injectReset(f FaultAt, e *Event, _ time.Time) (bool, error) {
	for _, b := range r.brokersOf(f) {
		r.cluster.Proxy(b).Reset()
	}
	r.fired["pg.reset"]++
	e.Until = e.VT
	return true, nil
}

// injectRowLock: an outside session holds one row locked for For, beside
// the workload (free-running: lockstep serves one request at a time, so it
// could only stall itself); heal waits for it.
func (r *runner) injectRowLock(f FaultAt, _ *Event, _ time.Time) (bool, error) {
	if r.pg != nil {
		return false, fmt.Errorf("%s needs a free-running run", f.Kind)
	}
	r.jobs.Add(1)
	go func() {
		defer r.jobs.Done()
		r.holdRow(f)
	}()
	return true, nil
}

// injectCrash kills brokers; consumers living beside one die with it.
func (r *runner) injectCrash(f FaultAt, _ *Event, _ time.Time) (bool, error) {
	for _, b := range r.brokersOf(f) {
		if !r.cluster.Up(b) {
			r.starved = append(r.starved, fmt.Sprintf("broker.crash at=%v broker=%d: the broker was not up", f.At, b))
			continue
		}
		r.cluster.Crash(b)
		r.fired["broker.crash"]++
		r.hist.Add(Event{Kind: KBroker, What: "crash", Broker: b, VT: r.vt()})
		for _, c := range r.clients {
			if c.broker == b {
				r.abandonAll(c)
			}
		}
	}
	return false, nil
}

// injectStop stops brokers gracefully (SIGTERM, a rolling restart): their
// consumers are other processes, so they keep their leases and go on
// through the other brokers.
func (r *runner) injectStop(f FaultAt, _ *Event, _ time.Time) (bool, error) {
	for _, b := range r.brokersOf(f) {
		if !r.cluster.Up(b) {
			continue
		}
		r.cluster.Stop(r.ctx, b)
		r.fired["broker.stop"]++
		r.hist.Add(Event{Kind: KBroker, What: "stop", Broker: b, VT: r.vt()})
	}
	return false, nil
}

// injectStart starts brokers again.
func (r *runner) injectStart(f FaultAt, _ *Event, _ time.Time) (bool, error) {
	for _, b := range r.brokersOf(f) {
		if err := r.startBroker(b); err != nil {
			return false, err
		}
	}
	return false, nil
}

// injectSkew sets brokers' clocks off by By.
func (r *runner) injectSkew(f FaultAt, e *Event, _ time.Time) (bool, error) {
	for _, b := range r.brokersOf(f) {
		r.cluster.SetSkew(b, f.By)
		r.fired["clock.skew"]++
	}
	e.Until = e.VT
	return true, nil
}

// injectKeyRotate: every broker in turn stops gracefully and comes back
// sealing with the next key; what the old key sealed must still open.
func (r *runner) injectKeyRotate(_ FaultAt, _ *Event, _ time.Time) (bool, error) {
	r.cluster.RotateKey()
	r.fired["key.rotate"]++
	for b := 0; b < r.o.Brokers; b++ {
		if !r.cluster.Up(b) {
			continue
		}
		r.cluster.Stop(r.ctx, b)
		r.hist.Add(Event{Kind: KBroker, What: "stop", Broker: b, VT: r.vt()})
		if err := r.startBroker(b); err != nil {
			return false, err
		}
	}
	return false, nil
}

// injectLeaderKill: the session holding the retention leader's lock ends
// (its server failed over, or an operator terminated it): its pass stops,
// and a leader is elected again at the next pass. For For, again every
// 20 ms, so passes running now are hit.
func (r *runner) injectLeaderKill(f FaultAt, _ *Event, _ time.Time) (bool, error) {
	deadline := time.Now().Add(f.For)
	r.jobs.Add(1)
	go func() {
		defer r.jobs.Done()
		for ctx := r.ctx; ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
			if pids, err := r.cluster.killLockSessions(ctx); err == nil {
				r.leaderKills.Add(int64(len(pids)))
				r.noteKills(pids)
			}
			if !time.Now().Before(deadline) {
				return
			}
		}
	}()
	r.fired["leader.kill"]++
	return true, nil
}

// injectDoubleLeader: every running broker runs the elected retention
// pass at once, lock or no lock, over and over for f.For: the jobs must be
// idempotent, so no property may notice.
func (r *runner) injectDoubleLeader(f FaultAt, _ *Event, _ time.Time) (bool, error) {
	deadline := time.Now().Add(f.For)
	for _, b := range r.brokersOf(f) {
		r.jobs.Add(1)
		go func() {
			defer r.jobs.Done()
			for time.Now().Before(deadline) && r.ctx.Err() == nil {
				br := r.cluster.Broker(b)
				if br == nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if res, err := leader.RetentionPass(r.ctx, br.Store(), br.Store().Pool(), 100); err == nil {
					r.doublePass.Add(1)
					r.doubleRows.Add(res.Expired + res.Completed + res.Evicted)
				}
			}
		}()
	}
	return true, nil
}

// injectRetentionFail: lockstep; the retention probe runs after the heal
// and the drain, when no other fault is active (probeRetention), and
// records the fault itself then.
func (r *runner) injectRetentionFail(f FaultAt, _ *Event, _ time.Time) (bool, error) {
	if r.pg == nil {
		return false, fmt.Errorf("%s needs a lockstep run", f.Kind)
	}
	r.retentionFaults = append(r.retentionFaults, f)
	return false, nil
}

// injectSweeperStall: a slow sweeper (free-running) pauses By between
// claiming timers and firing them, for For. Its claims must keep every
// other sweeper off those timers until they end.
func (r *runner) injectSweeperStall(f FaultAt, _ *Event, until time.Time) (bool, error) {
	for _, b := range r.brokersOf(f) {
		r.cluster.Stall(b, f.By)
		r.active = append(r.active, activeFault{f.Kind, b, until})
	}
	r.fired["sweeper.stall"]++
	return true, nil
}

// injectSpoolWrites fails the next Count writes on brokers' spool disks.
func (r *runner) injectSpoolWrites(f FaultAt, e *Event, _ time.Time) (bool, error) {
	for _, b := range r.brokersOf(f) {
		fs := r.cluster.SpoolFS(b)
		for i := 0; i < max(f.Count, 1); i++ {
			switch f.Kind {
			case "spool.eio":
				fs.FailNext("write", faults.ErrIO, 1)
			case "spool.enospc":
				fs.FailNext("write", faults.ErrNoSpace, 1)
			default:
				fs.TearNextWrite()
			}
		}
	}
	e.Until = e.VT
	return true, nil
}

// injectSpoolPoison spools a record PostgreSQL refuses every time (a NUL
// byte in text), twice: alone in a file, which the drain must quarantine
// before going on with newer ones, and planted in the broker's next
// spooled write, beside a real client's records, which must replay once
// while only the poison record is quarantined.
func (r *runner) injectSpoolPoison(f FaultAt, e *Event, _ time.Time) (bool, error) {
	for _, b := range r.brokersOf(f) {
		br := r.cluster.Broker(b)
		if br == nil || br.Spool() == nil {
			continue
		}
		poison := func(n int) spool.Event {
			return spool.Event{Queue: r.o.Queues[0].Name, Partition: "p0",
				TransactionID: fmt.Sprintf("poison-%d-%d\x00", r.vt(), n), Payload: []byte("null")}
		}
		// Spool write faults still queued take the first tries.
		for try := 0; try < 16; try++ {
			if err := br.Spool().Append([]spool.Event{poison(0)}); err == nil && br.Spool().Finalize() == nil {
				r.fired["spool.poison"]++
				break
			}
		}
		if data, err := spool.Encode([]spool.Event{poison(1)}); err == nil {
			r.cluster.SpoolFS(b).InjectNextAppend(data)
		}
	}
	e.Until = e.VT
	return true, nil
}

// injectMesh drops, delays or reorders the frames a broker sends.
func (r *runner) injectMesh(f FaultAt, _ *Event, _ time.Time) (bool, error) {
	m := r.cluster.Mesh()
	if m == nil {
		return false, fmt.Errorf("%s needs a free-running run of two brokers or more", f.Kind)
	}
	switch f.Kind {
	case "mesh.drop":
		m.Drop(f.Broker, f.For)
	case "mesh.delay":
		m.Delay(f.Broker, f.By, f.For)
	default:
		m.Reorder(f.Broker, f.For)
	}
	r.fired[f.Kind]++
	return true, nil
}

// injectProbe starts a wake, re-create or stale-cache probe beside the
// workload. It may outlast the workload: the fault schedule (and so the
// expiry of faults) goes on until every probe is done (runFree waits for
// them).
func (r *runner) injectProbe(f FaultAt, _ *Event, _ time.Time) (bool, error) {
	if r.cluster.Mesh() == nil {
		return false, fmt.Errorf("%s needs a free-running run of two brokers or more", f.Kind)
	}
	r.probes.Add(1)
	go func() {
		defer r.probes.Done()
		switch f.Kind {
		case "wake.probe":
			r.probeWakes(f)
		case "queue.recreate":
			r.probeRecreates(f)
		default:
			r.probeStales(f)
		}
	}()
	return true, nil
}
