package sim

import "fmt"

// CheckNoLoss: every push answered queued, duplicate or buffered is
// completed (acked or dead-lettered) in every consumer group of its queue,
// by the end of the run (after the final drain). Completions the history
// left indeterminate are settled by the final database read, for messages
// the group was actually given. Nothing is completed that was never pushed.
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
	for _, r := range t.rows {
		k := Key{r.Tenant, r.Q, r.P, r.Txid}
		for _, g := range append(append([]string(nil), r.DoneBy...), r.DLQBy...) {
			if delivered[g][k] {
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
