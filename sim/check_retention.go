package sim

import "fmt"

// retentionBoundMS bounds how long after a probe message became due its
// rule may leave it stored (virtual ms). The retention leader's pass is
// due every RETENTION_INTERVAL (5 s, the default the simulated brokers
// keep) on each broker's own clock, and the probe runs the services every
// retentionStep: a due message is deleted by the next pass, at most
// 5.25 s later. The bound is more than twice that.
const retentionBoundMS = 12000

// CheckRetention (retention-progress): every retention and eviction rule
// progresses within a bound while another rule fails. The retention probe
// (retention.fail) pushes one message under each rule and makes one rule
// fail (a fault raises on every delete of its queue's rows) for a while;
// its observations of the stored probe rows must show
//   - every message gone within retentionBoundMS of becoming due, unless
//     its own rule was failing then or less than retentionBoundMS before
//     (a rule is one statement across all queues: it fails as a whole);
//     so the failing rule resumes within the bound once the fault ended,
//     and no rule waits for another that fails;
//   - no message gone before it was due.
func CheckRetention(h []Event, _ Spec) []Violation {
	type due struct {
		rule string
		at   int64
	}
	pushed := map[Key]due{}
	var order []Key
	var fails []retentionFailure
	for _, e := range h {
		switch {
		case e.Kind == KProbe && e.What == "retention.push":
			k := Key{e.Tenant, e.Queue, e.Partition, e.Txid}
			if _, ok := pushed[k]; !ok {
				order = append(order, k)
			}
			pushed[k] = due{e.Rule, e.Due}
		case e.Kind == KFault && e.Fault == "retention.fail":
			fails = append(fails, retentionFailure{e.Rule, e.VT, max(e.Until, e.VT)})
		}
	}
	excused := func(rule string, vt int64) bool {
		for _, f := range fails {
			if f.rule == rule && f.from <= vt && vt < f.to+retentionBoundMS {
				return true
			}
		}
		return false
	}
	reported := map[Key]bool{}
	var out []Violation
	for _, e := range h {
		if e.Kind != KProbe || e.What != "retention.seen" {
			continue
		}
		stored := map[Key]bool{}
		for _, r := range e.Rows {
			stored[Key{r.Tenant, r.Queue, r.Partition, r.Txid}] = true
		}
		for _, k := range order {
			d := pushed[k]
			switch {
			case reported[k]:
			case stored[k] && e.VT >= d.at+retentionBoundMS && !excused(d.rule, e.VT):
				reported[k] = true
				out = append(out, Violation{"retention-progress", fmt.Sprintf("%s, due under rule %s at vt %d, still stored at vt %d, past the bound of %d ms (%s)",
					k, d.rule, d.at, e.VT, retentionBoundMS, failingNote(fails, d.rule, e.VT))})
			case !stored[k] && e.VT <= d.at:
				reported[k] = true
				out = append(out, Violation{"retention-progress", fmt.Sprintf("%s, due under rule %s at vt %d, already gone at vt %d", k, d.rule, d.at, e.VT)})
			}
		}
	}
	return limit(out, 20)
}

// retentionFailure is a retention.fail fault: rule failed from to to.
type retentionFailure struct {
	rule     string
	from, to int64
}

// failingNote says which rule a retention.fail fault made fail around vt.
func failingNote(fails []retentionFailure, rule string, vt int64) string {
	for _, f := range fails {
		if f.from <= vt && vt < f.to+retentionBoundMS {
			return fmt.Sprintf("rule %s failing from vt %d to %d, not rule %s", f.rule, f.from, f.to, rule)
		}
	}
	return "no rule failing"
}
