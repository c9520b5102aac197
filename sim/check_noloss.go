package sim

import "fmt"

// CheckNoLoss: every push answered queued, duplicate or buffered is
// completed (acked or dead-lettered) in every consumer group of its queue,
// by the end of the run (after the final drain). Completions the history
// left indeterminate are settled by the final database read, for messages
// the group was actually given, or may have been given by an autoAck pop
// whose answer was lost. Nothing is completed that was never pushed.
func CheckNoLoss(h []Event, s Spec) []Violation {
	t := build(h)
	done := map[string]map[Key]bool{}
	mark := func(g string, k Key) {
		if done[g] == nil {
			done[g] = map[Key]bool{}
		}
		done[g][k] = true
	}
	var out []Violation
	for _, c := range t.completions {
		mark(c.group, c.key)
		if !t.attempted[c.key] {
			out = append(out, Violation{"no-loss", fmt.Sprintf("%s completed in group %s but never pushed", c.key, c.group)})
		}
	}
	// The final read settles completions the history left indeterminate
	// (an ack whose answer was lost), but only for messages a consumer of
	// that group actually received: a cursor that moved past a message
	// nobody was given is exactly the stranding this property exists for.
	delivered := map[string]map[Key]bool{}
	for _, d := range t.deliveries {
		if delivered[d.group] == nil {
			delivered[d.group] = map[Key]bool{}
		}
		delivered[d.group][d.key] = true
	}
	// An autoAck pop whose answer was lost (a reset after its commit) may
	// have taken, and completed, messages nobody saw: at-most-once is what
	// autoAck means. Messages of its queue pushed before its answer came
	// may have gone that way.
	lostAutoAck := map[string]map[[2]string]int{} // group -> (tenant, queue) -> latest answer index
	for _, c := range calls(h) {
		if c.in.Op == "pop" && c.in.Status == "autoack" && c.done != nil && c.done.K == KInfo {
			g := groupOf(c.in.G)
			if lostAutoAck[g] == nil {
				lostAutoAck[g] = map[[2]string]int{}
			}
			tq := [2]string{c.in.Tenant, c.in.Q}
			lostAutoAck[g][tq] = max(lostAutoAck[g][tq], c.done.I)
		}
	}
	pushedAt := map[Key]int{}
	for _, p := range t.pushes {
		if at, ok := pushedAt[p.key]; !ok || p.invokeI < at {
			pushedAt[p.key] = p.invokeI
		}
	}
	for _, r := range t.rows {
		k := Key{r.Tenant, r.Q, r.P, r.Txid}
		for _, g := range append(append([]string(nil), r.DoneBy...), r.DLQBy...) {
			at, lost := lostAutoAck[g][[2]string{k.Tenant, k.Q}]
			if delivered[g][k] || (lost && pushedAt[k] < at) {
				mark(g, k)
			}
		}
	}
	for _, k := range sortedKeys(t.acked) {
		groups := s.Groups[k.Q]
		if len(groups) == 0 {
			groups = []string{QueueMode}
		}
		for _, g := range groups {
			if !done[g][k] {
				out = append(out, Violation{"no-loss", fmt.Sprintf("%s acknowledged to its producer but never completed in group %s", k, g)})
			}
		}
	}
	return limit(out, 20)
}
