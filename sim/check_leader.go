package sim

import "fmt"

// killWindowMS bounds how long before a pass's start a session killed from
// outside (leader.kill) counts as that pass's: a pid is reused only after
// the server's pids wrapped, never within a second.
const killWindowMS = 1000

// endSlackMS widens the span of an event that may have ended sessions.
const endSlackMS = 1000

// CheckLeaderPasses judges the leader passes (KLeader): no pass may act
// after its lock session died, and no two passes of a role may overlap.
//
//   - A pass whose lock session was confirmed terminated before its first
//     statement must fail: a cut made in its start (leader.cut), or a kill
//     of its session recorded before its start (leader.kill: the session
//     took the lock, then died before the pass began), within
//     killWindowMS. Ending without error means its statements ran on
//     another session: it acted without the lock.
//   - Two passes of one role overlap when the later one started (took the
//     lock) before the earlier one ended (its end is told before the lock
//     is released): only a pass running without its lock can. An earlier
//     pass that failed, or during which any session was cut or a fault
//     that ends sessions struck (by its times, within endSlackMS), may
//     have lost its session after its last statement and is not judged:
//     that race cannot be ordered.
func CheckLeaderPasses(h []Event, _ Spec) []Violation {
	// Positions in h (at, endAt, cutAt) order the events, not their I.
	type pass struct {
		start, end       Event
		at, endAt, cutAt int
		ended            bool
		cut              *Event
	}
	var passes []*pass
	byNum := map[int]*pass{}
	var kills []Event // cuts made from outside, in order
	var killAt []int
	for i, e := range h {
		if e.Kind != KLeader {
			continue
		}
		switch e.What {
		case "start":
			p := &pass{start: e, at: i}
			passes = append(passes, p)
			byNum[e.Pass] = p
		case "end":
			if p := byNum[e.Pass]; p != nil {
				p.end, p.endAt, p.ended = e, i, true
			}
		case "cut":
			if p := byNum[e.Pass]; e.Pass > 0 && p != nil && e.Session == p.start.Session {
				c := e
				p.cut, p.cutAt = &c, i
			} else if e.Pass == 0 {
				kills, killAt = append(kills, e), append(killAt, i)
			}
		}
	}
	var out []Violation
	name := func(p *pass) string {
		return fmt.Sprintf("%s pass %d (broker %d, session %d, vt %d-%d)", p.start.Role, p.start.Pass, p.start.Broker, p.start.Session, p.start.VT, p.end.VT)
	}
	for _, p := range passes {
		if !p.ended || p.end.Err != "" {
			continue
		}
		if p.cut != nil && p.cutAt > p.at && p.cutAt < p.endAt {
			out = append(out, Violation{"leader-passes", fmt.Sprintf("%s ended without error, though its lock session was terminated at vt %d, before its first statement: it acted without the lock",
				name(p), p.cut.VT)})
			continue
		}
		for j, k := range kills {
			if k.Session == p.start.Session && killAt[j] < p.at && p.start.VT-k.VT <= killWindowMS {
				out = append(out, Violation{"leader-passes", fmt.Sprintf("%s ended without error, though its lock session was killed at vt %d, before the pass began: it acted without the lock",
					name(p), k.VT)})
				break
			}
		}
	}
	// ends are the events after which a session may have died unseen: a
	// cut, a broker event, a fault that ends or stalls sessions. A fault
	// is recorded after it acted (a session it ended may free the lock
	// before that), so these are placed by their times, which are taken
	// before they act, widened by endSlackMS.
	var ends []Event
	for _, e := range h {
		switch {
		case e.Kind == KLeader && e.What == "cut", e.Kind == KBroker:
			ends = append(ends, e)
		case e.Kind == KFault:
			switch e.Fault {
			case "pg.reset", "pg.readonly", "pg.blackhole", "pg.refuse", "pg.delay", "leader.kill", "leader.cut", "broker.crash", "broker.stop", "key.rotate":
				ends = append(ends, e)
			}
		}
	}
	excused := func(p *pass) bool {
		for _, e := range ends {
			if e.VT <= p.end.VT+endSlackMS && max(e.VT, e.Until)+endSlackMS >= p.start.VT {
				return true
			}
		}
		return false
	}
	for i, p := range passes {
		if !p.ended || p.end.Err != "" {
			continue
		}
		for _, q := range passes[i+1:] {
			if q.at > p.endAt {
				break
			}
			if q.start.Role != p.start.Role {
				continue
			}
			if !excused(p) {
				out = append(out, Violation{"leader-passes", fmt.Sprintf("%s overlaps %s pass %d (broker %d, session %d), which took the lock at vt %d before it ended",
					name(p), q.start.Role, q.start.Pass, q.start.Broker, q.start.Session, q.start.VT)})
			}
			break
		}
	}
	return out
}
