package sim

import "fmt"

// CheckNoLoss: every push answered queued, duplicate or buffered is
// completed (acked or dead-lettered) in every consumer group of its queue,
// by the end of the run (after the final drain). Completions the history
// left indeterminate are settled by the final database read. Nothing is
// completed that was never pushed.
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
	for _, r := range t.rows {
		k := Key{r.Tenant, r.Q, r.P, r.Txid}
		for _, g := range append(append([]string(nil), r.DoneBy...), r.DLQBy...) {
			mark(g, k)
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
