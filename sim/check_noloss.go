package sim

import "fmt"

// CheckNoLoss: every push answered queued, duplicate or buffered is
// completed (acked or dead-lettered) in every consumer group of its queue,
// by the end of the run (after the final drain). Completions the history
// left indeterminate are settled by the final database read, for messages
// the group was actually given, or may have been given by an autoAck pop
// whose answer was lost. Nothing is completed that was never pushed.
//
// On a queue that evicts (maxWaitTimeSeconds), a message may go
// unconsumed once it waited that long; but its group must not be given a
// message pushed after it, from its partition, before it could have been
// evicted: that is a message skipped, not evicted.
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
	// may have gone that way. Not a pop whose client left while it claimed
	// (Cancelled): the broker knew nobody would receive its answer, and
	// must leave the messages where they were.
	lostAutoAck := map[string]map[[2]string]int{} // group -> (tenant, queue) -> latest answer index
	for _, c := range calls(h) {
		if c.in.Op == "pop" && c.in.Status == "autoack" && c.done != nil && c.done.Kind == KInfo && c.done.Err != Cancelled {
			g := groupOf(c.in.Group)
			if lostAutoAck[g] == nil {
				lostAutoAck[g] = map[[2]string]int{}
			}
			tq := [2]string{c.in.Tenant, c.in.Queue}
			lostAutoAck[g][tq] = max(lostAutoAck[g][tq], c.done.Index)
		}
	}
	pushedAt := map[Key]int{}
	for _, p := range t.pushes {
		if at, ok := pushedAt[p.key]; !ok || p.invokeI < at {
			pushedAt[p.key] = p.invokeI
		}
	}
	for _, r := range t.rows {
		k := Key{r.Tenant, r.Queue, r.Partition, r.Txid}
		for _, g := range append(append([]string(nil), r.DoneBy...), r.DLQBy...) {
			at, lost := lostAutoAck[g][[2]string{k.Tenant, k.Q}]
			if delivered[g][k] || (lost && pushedAt[k] < at) {
				mark(g, k)
			}
		}
	}
	corrupted := corruptedKeys(h)
	for _, k := range sortedKeys(t.acked) {
		if corrupted[k] {
			continue // its record rotted on disk: the spool-corrupt rule judges it
		}
		groups := s.Groups[k.Q]
		if len(groups) == 0 {
			groups = []string{QueueMode}
		}
		groups = append(groups[:len(groups):len(groups)], t.lateGroupsOf(k)...) // late groups: what came after their start
		for _, g := range groups {
			if !done[g][k] && s.MaxWaitMS[k.Q] > 0 {
				if v, skipped := t.skippedYoung(k, g, s); skipped {
					out = append(out, v)
					continue
				}
				if t.evictable(k, h[len(h)-1].VT, s) {
					continue // evicted unconsumed, as maxWaitTimeSeconds allows
				}
			}
			if !done[g][k] {
				out = append(out, Violation{"no-loss", fmt.Sprintf("%s acknowledged to its producer but never completed in group %s", k, g)})
			}
		}
	}
	return limit(out, 20)
}

// skippedYoung reports k, never completed in g, as skipped when g was
// given a message of k's partition pushed after k was answered, before k
// was old enough to be evicted, and before (or without) being given k.
func (t *timeline) skippedYoung(k Key, g string, s Spec) (Violation, bool) {
	answered := -1
	for _, p := range t.pushes {
		if p.key == k && (answered < 0 || p.okI < answered) {
			answered = p.okI
		}
	}
	evictAt := t.pushVT[k] + s.MaxWaitMS[k.Q] - s.SkewMS
	for _, d := range t.deliveries {
		k2 := d.key
		if d.group != g || k2 == k || k2.Tenant != k.Tenant || k2.Q != k.Q || k2.P != k.P || d.okVT >= evictAt {
			continue
		}
		if t.deliveredBy(k, g, d.okI) {
			break // given before or with it: its lease ran out, then eviction took it
		}
		if first, ok := t.firstPushInvoke(k2); ok && first > answered {
			return Violation{"no-loss", fmt.Sprintf("%s never completed in group %s, which was given %s (pushed after it) at vt %d, before it could have been evicted (vt %d)",
				k, g, k2, d.okVT, evictAt)}, true
		}
	}
	return Violation{}, false
}

func (t *timeline) firstPushInvoke(k Key) (int, bool) {
	first, ok := 0, false
	for _, p := range t.pushes {
		if p.key == k && (!ok || p.invokeI < first) {
			first, ok = p.invokeI, true
		}
	}
	return first, ok
}

// deliveredBy reports whether k was given to g in an answer at or before
// index i.
func (t *timeline) deliveredBy(k Key, g string, i int) bool {
	for _, d := range t.deliveries {
		if d.key == k && d.group == g && d.okI <= i {
			return true
		}
	}
	return false
}
