package sim

import (
	"cmp"
	"fmt"
	"slices"
)

// CheckNoDoubleDelivery, within each consumer group:
//   - a message is completed at most once;
//   - it is never delivered after it was completed;
//   - it is never completed under a lease that another delivery of it had
//     already superseded (a stale consumer's ack must lose);
//   - it is never handed to a second consumer while an earlier lease on it
//     may still be live (deliveries ordered by answer): a delivery D2 whose
//     pop returned before
//     E1 = (D1's pop invoke time, or the invoke time of D1's latest renewal)
//   - lease length is a violation unless D1's lease was released first.
//     This is sound: D1's lease began no earlier than its invoke, and D2's
//     grant happened no later than D2's return, both in database time.
func CheckNoDoubleDelivery(h []Event, _ Spec) []Violation {
	t := build(h)
	type gk struct {
		g string
		k Key
	}
	var out []Violation
	completedAt := map[gk]int{}
	for _, c := range t.completions {
		if c.uncertain {
			continue
		}
		id := gk{c.group, c.key}
		if prev, ok := completedAt[id]; ok {
			out = append(out, Violation{"no-double-delivery", fmt.Sprintf("%s completed twice in group %s (events %d and %d)", c.key, c.group, prev, c.okI)})
			continue
		}
		completedAt[id] = c.okI
	}
	for _, c := range t.completions {
		if c.lease == "" {
			continue
		}
		own := -1
		for _, d := range t.deliveries {
			if d.key == c.key && d.group == c.group && d.lease == c.lease {
				own = d.okI
			}
		}
		for _, d := range t.deliveries {
			if d.key == c.key && d.group == c.group && d.lease != c.lease && d.okI > own && d.okI < c.invokeI {
				out = append(out, Violation{"no-double-delivery", fmt.Sprintf("%s completed under lease %s (event %d) after lease %s had taken it over (event %d)", c.key, c.lease, c.okI, d.lease, d.okI)})
				break
			}
		}
	}
	// Deliveries in the order their answers arrived: a long poll invoked
	// before another pop but answered after it was granted after it too,
	// and its lease cannot have been live before its grant.
	byAnswer := slices.Clone(t.deliveries)
	slices.SortStableFunc(byAnswer, func(a, b delivery) int { return cmp.Compare(a.okI, b.okI) })
	last := map[gk]delivery{}
	for _, d := range byAnswer {
		id := gk{d.group, d.key}
		if ci, ok := completedAt[id]; ok && ci < d.invokeI {
			out = append(out, Violation{"no-double-delivery", fmt.Sprintf("%s delivered in group %s (event %d) after it was completed (event %d)", d.key, d.group, d.okI, ci)})
		}
		if prev, ok := last[id]; ok && prev.lease != "" && prev.lease != d.lease && !prev.autoAck {
			end := t.leaseEnd(prev, d.okI)
			released := false
			for _, ri := range t.releases[prev.lease] {
				if ri < d.okI {
					released = true
				}
			}
			if !released && d.okVT < end {
				out = append(out, Violation{"no-double-delivery", fmt.Sprintf("%s handed to lease %s at vt %d (event %d) while lease %s was live until vt %d", d.key, d.lease, d.okVT, d.okI, prev.lease, end)})
			}
		}
		last[id] = d
	}
	return limit(out, 20)
}

// leaseEnd is the latest instant d's lease may be live, counting renewals
// answered before event index before.
func (t *timeline) leaseEnd(d delivery, before int) int64 {
	end := d.invokeVT + int64(d.leaseSecs)*1000
	for _, x := range t.extends[d.lease] {
		if x.invokeI < before && x.invokeVT+int64(x.secs)*1000 > end {
			end = x.invokeVT + int64(x.secs)*1000
		}
	}
	return end
}
