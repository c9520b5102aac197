package sim

import "fmt"

// timerSlackMS covers a sweeper's sleep and a loaded machine when judging
// whether an overdue timer should have fired by the final read.
const timerSlackMS = 5000

// CheckTimers: a timer whose schedule was answered "scheduled" is stored
// exactly once in TimerQueue, never before the deliverAt it was answered,
// unless a cancel may have removed it (answered "cancelled", or lost: then
// either outcome is right); a cancel answered "cancelled" means it is never
// stored; a failed schedule stores nothing. At the final read (after the sweepers settled), no timer
// is still pending past its deliverAt by more than the sweeper lease plus
// slack: claims of a broker that died were recovered within the lease, and a
// poison timer (timer-poison: one whose fire PostgreSQL refuses) held back
// none of the timers claimed with it; the poison timer itself is left
// pending (failed), never stored.
func CheckTimers(h []Event, _ Spec) []Violation {
	type timer struct {
		outcome   string // ok, fail, info
		at        int64
		cancelled bool // a cancel answered "cancelled"
		mayBeGone bool // a cancel whose answer was lost may have cancelled it
	}
	timers := map[[2]string]*timer{}
	poison := map[[2]string]bool{}
	calls := map[int]Event{}
	var final *Event
	for i, e := range h {
		switch {
		case e.Kind == KInvoke && (e.Op == "timer" || e.Op == "timer-cancel" || e.Op == "timer-poison"):
			calls[e.Call] = e
		case e.Op == "timer-poison" && e.Kind != KInvoke:
			in := calls[e.Call]
			poison[[2]string{in.Tenant, in.Txid}] = true
		case e.Kind == KFinal:
			final = &h[i]
		case e.Op == "timer" && e.Kind != KInvoke:
			in := calls[e.Call]
			timers[[2]string{in.Tenant, in.Txid}] = &timer{outcome: e.Kind, at: e.At}
		case e.Op == "timer-cancel" && e.Kind == KOK && e.Status == "cancelled":
			in := calls[e.Call]
			if t := timers[[2]string{in.Tenant, in.Txid}]; t != nil {
				t.cancelled = true
			}
		case e.Op == "timer-cancel" && e.Kind == KInfo:
			in := calls[e.Call]
			if t := timers[[2]string{in.Tenant, in.Txid}]; t != nil {
				t.mayBeGone = true
			}
		}
	}
	if final == nil {
		return nil
	}
	var out []Violation
	stored := map[[2]string]Row{}
	for _, r := range final.Rows {
		if r.Queue == TimerQueue {
			stored[[2]string{r.Tenant, r.Txid}] = r
		}
	}
	pending := map[[2]string]PendingTimer{}
	for _, p := range final.Timers {
		pending[[2]string{p.Tenant, p.Key}] = p
		if poison[[2]string{p.Tenant, p.Key}] {
			continue // it can never fire; the timers claimed with it must
		}
		if final.DBNow-p.At > SweeperLease.Milliseconds()+timerSlackMS {
			out = append(out, Violation{"timers", fmt.Sprintf("%s/%s still pending %d ms after its deliverAt at the final read",
				p.Tenant, p.Key, final.DBNow-p.At)})
		}
	}
	for k, t := range timers {
		row, isStored := stored[k]
		_, isPending := pending[k]
		switch {
		case isStored && row.Count != 1:
			out = append(out, Violation{"timers", fmt.Sprintf("%s/%s stored %d times", k[0], k[1], row.Count)})
		case isStored && t.cancelled:
			out = append(out, Violation{"timers", fmt.Sprintf("%s/%s fired after a cancel answered cancelled", k[0], k[1])})
		case isStored && t.outcome == KFail:
			out = append(out, Violation{"timers", fmt.Sprintf("%s/%s fired though its schedule failed", k[0], k[1])})
		case isStored && t.outcome == KOK && row.At < t.at:
			out = append(out, Violation{"timers", fmt.Sprintf("%s/%s fired %d ms before its deliverAt", k[0], k[1], t.at-row.At)})
		case !isStored && !isPending && t.outcome == KOK && !t.cancelled && !t.mayBeGone:
			out = append(out, Violation{"timers", fmt.Sprintf("%s/%s was scheduled but is neither fired nor pending (lost)", k[0], k[1])})
		}
	}
	return out
}

// kvSlackMS covers the millisecond rounding of the history's clock.
const kvSlackMS = 5

// CheckKV: a KV row put with a ttl is read as found by every get answered
// before the put was invoked plus the ttl, and as missing by every get
// invoked after the put was answered plus the ttl: expired rows are never
// read, live ones never lost. Keys are put once each.
func CheckKV(h []Event, _ Spec) []Violation {
	type put struct{ invoked, answered, ttl int64 }
	calls := map[int]Event{}
	puts := map[[2]string]put{}
	var out []Violation
	for _, e := range h {
		switch {
		case e.Kind == KInvoke && (e.Op == "kv-put" || e.Op == "kv-get"):
			calls[e.Call] = e
		case e.Op == "kv-put" && e.Kind == KOK:
			in := calls[e.Call]
			puts[[2]string{in.Tenant, in.Txid}] = put{in.VT, e.VT, int64(in.LeaseSecs) * 1000}
		case e.Op == "kv-get" && e.Kind == KOK:
			in := calls[e.Call]
			p, ok := puts[[2]string{in.Tenant, in.Txid}]
			if !ok || in.VT < p.answered {
				continue
			}
			if e.Status == "found" && in.VT > p.answered+p.ttl+kvSlackMS {
				out = append(out, Violation{"kv", fmt.Sprintf("%s/%s read %d ms after it expired", in.Tenant, in.Txid,
					in.VT-p.answered-p.ttl)})
			}
			if e.Status == "missing" && e.VT < p.invoked+p.ttl-kvSlackMS {
				out = append(out, Violation{"kv", fmt.Sprintf("%s/%s missing %d ms before its ttl ran out", in.Tenant, in.Txid,
					p.invoked+p.ttl-e.VT)})
			}
		}
	}
	return out
}
