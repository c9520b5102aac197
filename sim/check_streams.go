package sim

import "fmt"

// CheckStream judges the streaming workload (ops_streams.go) from the
// final state and sink: every source message acknowledged to its producer
// is counted exactly once in its partition's committed state, and nothing
// else is; every committed cycle left exactly one sink message, a rejected
// one none, an indeterminate one at most one; and the sink's messages name
// exactly the counted messages, each once. A cycle that lost its lease, or
// whose answer was lost, must have committed all of its work or none.
func CheckStream(h []Event, _ Spec) []Violation {
	final := finalEvent(h)
	if final == nil {
		return nil
	}
	pushed, acked := map[Key]bool{}, map[Key]bool{}
	cycles := map[string]string{} // cycle id -> committed | rejected | maybe
	for _, c := range calls(h) {
		switch c.in.Op {
		case "stream-push":
			k := Key{c.in.Tenant, StreamSource, c.in.Partition, c.in.Txid}
			pushed[k] = true
			if c.ok() && (c.done.Status == "queued" || c.done.Status == "duplicate" || c.done.Status == "buffered") {
				acked[k] = true
			}
		case "stream-cycle":
			switch {
			case c.ok() && c.done.Status == "committed":
				cycles[c.in.Txid] = "committed"
			case c.ok() && c.done.Status == "rejected", c.done != nil && c.done.Kind == KFail:
				cycles[c.in.Txid] = "rejected"
			default:
				cycles[c.in.Txid] = "maybe"
			}
		}
	}
	var out []Violation
	counted := map[Key]int{}
	for _, st := range final.StreamState {
		if st.N != len(st.IDs) {
			out = append(out, Violation{"stream", fmt.Sprintf("%s/%s: count %d but %d ids", st.Tenant, st.Partition, st.N, len(st.IDs))})
		}
		for _, id := range st.IDs {
			k := Key{st.Tenant, StreamSource, st.Partition, id}
			counted[k]++
			if counted[k] == 2 {
				out = append(out, Violation{"stream", fmt.Sprintf("%s counted twice in committed state", k)})
			}
			if !pushed[k] {
				out = append(out, Violation{"stream", fmt.Sprintf("%s counted but never pushed", k)})
			}
		}
	}
	for _, k := range sortedKeys(acked) {
		if counted[k] == 0 {
			out = append(out, Violation{"stream", fmt.Sprintf("%s acknowledged to its producer but never counted", k)})
		}
	}
	emitted, inSink := map[string]int{}, map[string]map[string]int{} // cycle -> sink messages; tenant -> txid -> mentions
	for _, o := range final.StreamSink {
		emitted[o.Cycle]++
		if inSink[o.Tenant] == nil {
			inSink[o.Tenant] = map[string]int{}
		}
		for _, id := range o.IDs {
			inSink[o.Tenant][id]++
		}
	}
	for id, n := range emitted {
		switch verdict, ok := cycles[id]; {
		case !ok:
			out = append(out, Violation{"stream", fmt.Sprintf("sink output of cycle %s, which was never sent", id)})
		case verdict == "rejected":
			out = append(out, Violation{"stream", fmt.Sprintf("cycle %s answered success:false but left sink output", id)})
		case n > 1:
			out = append(out, Violation{"stream", fmt.Sprintf("cycle %s left %d sink messages", id, n)})
		}
	}
	for id, verdict := range cycles {
		if verdict == "committed" && emitted[id] == 0 {
			out = append(out, Violation{"stream", fmt.Sprintf("cycle %s committed but left no sink output", id)})
		}
	}
	// The sink names what the state counts: each counted message in
	// exactly one sink message of its tenant.
	for k, n := range counted {
		if got := inSink[k.Tenant][k.Txid]; got != n {
			out = append(out, Violation{"stream", fmt.Sprintf("%s counted %d times, in the sink %d times", k, n, got)})
		}
	}
	return limit(out, 20)
}
