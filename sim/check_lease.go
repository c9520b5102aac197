package sim

import "fmt"

// CheckLeaseRecovery: a message whose consumer went away (a client
// "abandon" event, e.g. after its broker crashed) becomes available again
// once its lease ends. It must be delivered again in its group, and no pop
// of that group and queue may come back empty more than RecoverySlackMS
// after the lease ended, while no fault is active, before it is, unless it
// may have been evicted (maxWaitTimeSeconds) by then, or its partition may
// be inside its windowBuffer (check_qopts.go).
func CheckLeaseRecovery(h []Event, s Spec) []Violation {
	t := build(h)
	t.hide = newHiding(h, s)
	type gk struct {
		g string
		k Key
	}
	held := map[string][]delivery{} // lease -> deliveries
	for _, d := range t.deliveries {
		if d.lease != "" {
			held[d.lease] = append(held[d.lease], d)
		}
	}
	var faults [][2]int64
	for _, e := range h {
		if e.Kind == KFault {
			faults = append(faults, [2]int64{e.VT, e.Until})
		}
	}
	healthy := func(vt int64) bool {
		for _, f := range faults {
			if vt >= f[0] && vt < f[1] {
				return false
			}
		}
		return true
	}
	completed := map[gk]int{}
	for _, c := range t.completions {
		completed[gk{c.group, c.key}] = c.okI
	}
	calls := calls(h)
	var out []Violation
	for _, e := range h {
		if e.Kind != KClient || e.What != "abandon" {
			continue
		}
		for _, d := range held[e.Lease] {
			id := gk{d.group, d.key}
			if ci, ok := completed[id]; ok && ci < e.Index {
				continue // finished before the consumer left
			}
			end := t.leaseEnd(d, len(h))
			redelivered := -1
			for _, d2 := range t.deliveries {
				if d2.key == d.key && d2.group == d.group && d2.okI > e.Index {
					redelivered = d2.okI
					break
				}
			}
			if redelivered < 0 {
				if t.evictable(d.key, h[len(h)-1].VT, s) {
					continue // may have been evicted before its turn came again
				}
				if ci, ok := completed[id]; !ok || ci < e.Index {
					out = append(out, Violation{"lease-recovery", fmt.Sprintf("%s abandoned with lease %s (event %d) was never delivered again in group %s", d.key, e.Lease, e.Index, d.group)})
				}
				continue
			}
			for _, c := range calls {
				if c.in.Op != "pop" || !c.ok() || len(c.done.Msgs) > 0 || c.in.Index <= e.Index || c.done.Index >= redelivered {
					continue
				}
				if groupOf(c.in.Group) != d.group || c.in.Queue != d.key.Q || c.in.Tenant != d.key.Tenant || (c.in.Partition != "" && c.in.Partition != d.key.P) {
					continue
				}
				if c.in.VT >= end+s.RecoverySlackMS && healthy(c.in.VT) && !t.heldByOther(d, c.in.Index, c.in.VT) && !t.evictable(d.key, c.in.VT, s) && !t.hide.hidden(d.key, c.in.VT, c.done.VT) {
					out = append(out, Violation{"lease-recovery", fmt.Sprintf("%s still hidden at vt %d (pop event %d answered empty), its lease %s ended at vt %d", d.key, c.in.VT, c.in.Index, e.Lease, end)})
					break
				}
			}
		}
	}
	return limit(out, 20)
}

// heldByOther reports whether, at event index i and time vt, d's partition
// is legitimately leased in d's group under another lease: a later
// delivery from that partition whose lease is unreleased and unexpired.
func (t *timeline) heldByOther(d delivery, i int, vt int64) bool {
	return t.leasedExcept(d.key, d.group, d.lease, i, vt)
}
