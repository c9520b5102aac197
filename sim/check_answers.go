package sim

import "fmt"

// answerGrace is how long after a database fault ends its effects may
// still explain a 5xx (the probe's backoff, a reconnect).
const answerGrace = 10_000 // ms

// CheckAnswers: every answer has its documented shape (a 2xx with an
// empty or undecodable body is a violation), and no push answers 5xx
// outside a fault window: with the spool on, a push that cannot commit is
// buffered, so a push 5xx on a healthy database is a broker bug (a unique
// violation on a resent transactionId, say) that would otherwise count as
// merely indeterminate. Spool disk faults stay open to the end of the run
// (a failed write is consumed by whichever push comes next). Faults that
// only slow or reorder (held COMMITs, mesh faults, a skewed clock, a double
// leader) open no window: none of them excuses a 5xx.
func CheckAnswers(h []Event, _ Spec) []Violation {
	var out []Violation
	type window struct{ from, to int64 }
	var windows []window
	for _, e := range h {
		switch {
		case e.Kind == KFault && benign(e.Fault):
		case e.Kind == KFault && len(e.Fault) > 6 && e.Fault[:6] == "spool.":
			windows = append(windows, window{e.VT, 1 << 62})
		case e.Kind == KFault:
			windows = append(windows, window{e.VT, max(e.Until, e.VT) + answerGrace})
		case e.Kind == KBroker:
			windows = append(windows, window{e.VT, e.VT + answerGrace})
		}
	}
	faulty := func(from, to int64) bool {
		for _, w := range windows {
			if from <= w.to && to >= w.from {
				return true
			}
		}
		return false
	}
	for _, c := range calls(h) {
		if c.done == nil {
			continue
		}
		if c.done.Bad != "" {
			out = append(out, Violation{"answers", fmt.Sprintf("%s (event %d): %s", c.in.Op, c.done.Index, c.done.Bad)})
		}
		if c.in.Op == "push" && c.done.Code >= 500 && !faulty(c.in.VT, c.done.VT) {
			out = append(out, Violation{"answers", fmt.Sprintf("push %s/%s/%s answered %d (event %d) on a healthy database, outside every fault window",
				c.in.Queue, c.in.Partition, c.in.Txid, c.done.Code, c.done.Index)})
		}
	}
	out = append(out, answeredIDs(h)...)
	return limit(out, 20)
}

// answeredIDs: a push's answer is its own item's. Every message delivered
// with a key is the message a push of that key was answered with (a
// duplicate answers the stored one's id), so a batch of combined pushes
// whose answers were handed to the wrong requests shows as a delivery of a
// message no push of its key was told of. A key any of whose pushes went
// unanswered (buffered, indeterminate, refused) is not judged: its stored
// id was never told. Ids are in process only, so recorded histories are not
// judged either.
func answeredIDs(h []Event) []Violation {
	told := map[Key]map[string]bool{}
	untold := map[Key]bool{}
	for _, c := range calls(h) {
		if c.in.Op != "push" {
			continue
		}
		k := c.in.Key()
		if c.done == nil || c.done.Kind != KOK || c.done.MsgID == "" || (c.done.Status != "queued" && c.done.Status != "duplicate") {
			untold[k] = true
			continue
		}
		if told[k] == nil {
			told[k] = map[string]bool{}
		}
		told[k][c.done.MsgID] = true
	}
	var out []Violation
	for _, e := range h {
		if e.Kind != KOK || e.Op != "pop" {
			continue
		}
		for _, m := range e.Msgs {
			k := m.Key()
			if m.ID == "" || untold[k] || told[k] == nil || told[k][m.ID] {
				continue
			}
			out = append(out, Violation{"answers", fmt.Sprintf("%s was delivered as message %s (event %d), which no push of it was answered with: a push answer carried another request's result", k, m.ID, e.Index)})
		}
	}
	return out
}

// benign reports whether a fault only slows, reorders or duplicates work,
// so that every answer must still be a real one.
func benign(fault string) bool {
	switch fault {
	case "pg.hold", "clock.skew", "leader.double", "mesh.drop", "mesh.delay", "mesh.reorder", "sweeper.stall", "leader.kill", "leader.cut":
		return true
	case FMoveCrashed:
		// Only the runner's mover died: no broker saw it.
		return true
	case "pg.readonly":
		// A read-only server refuses at once with 25006, an outage the
		// spool absorbs: it excuses no push 5xx either.
		return true
	}
	return false
}
