package sim

import (
	"fmt"
	"sort"
)

// CheckFIFO: within a partition and a consumer group, if push A was
// answered before push B was invoked, A is first delivered before B.
// Messages delivered more than once in the group are left out ("retries
// aside"). B counts as delivered first only when that is certain: B's pop
// was answered before A's pop was invoked, or both came in one batch with
// B ahead. Two pops of a group that overlap (free-running) may have been
// granted in either order, whatever order their answers arrived in.
func CheckFIFO(h []Event, s Spec) []Violation {
	t := build(h)
	type gk struct {
		g string
		k Key
	}
	type pos struct{ invokeI, okI, pos int }
	first := map[gk]pos{}
	count := map[gk]int{}
	for _, d := range t.deliveries {
		id := gk{d.group, d.key}
		count[id]++
		if _, ok := first[id]; !ok {
			first[id] = pos{d.invokeI, d.okI, d.pos}
		}
	}
	before := func(a, b pos) bool { return a.okI < b.invokeI || (a.okI == b.okI && a.pos < b.pos) }
	type part struct{ tenant, q, p string }
	byPart := map[part][]pushRec{}
	seen := map[Key]bool{}
	for _, p := range t.pushes {
		if p.status != "queued" || seen[p.key] {
			continue
		}
		seen[p.key] = true
		pk := part{p.key.Tenant, p.key.Q, p.key.P}
		byPart[pk] = append(byPart[pk], p)
	}
	parts := make([]part, 0, len(byPart))
	for pk := range byPart {
		parts = append(parts, pk)
	}
	sort.Slice(parts, func(i, j int) bool { return fmt.Sprint(parts[i]) < fmt.Sprint(parts[j]) })
	var out []Violation
	for _, pk := range parts {
		pushes := byPart[pk]
		groups := s.Groups[pk.q]
		if len(groups) == 0 {
			groups = []string{QueueMode}
		}
		for _, g := range groups {
			for _, b := range pushes {
				fb, ok := first[gk{g, b.key}]
				if !ok || count[gk{g, b.key}] > 1 {
					continue
				}
				for _, a := range pushes {
					if a.okI >= b.invokeI || count[gk{g, a.key}] > 1 {
						continue
					}
					fa, ok := first[gk{g, a.key}]
					if ok && before(fb, fa) {
						out = append(out, Violation{"fifo", fmt.Sprintf("group %s: %s (pushed first) delivered after %s", g, a.key, b.key)})
					}
				}
			}
		}
	}
	return limit(out, 20)
}
