package sim

import "fmt"

// CheckLateExtends (late-extend): an extend of a lease that has certainly
// ended must not renew it. A lease id is one pop's: once its lease expired
// or an ack released it, the messages may be someone else's, and an extend
// answered "renewed" brought a dead lease back to life.
//
// Judged in lockstep, where the database's time is the virtual time: a
// pop's lease ends leaseSecs after its claim, and the claim happened at the
// latest when the pop answered; an extend answered renewed (or whose answer
// was lost) may have pushed the end to its own answer plus its seconds.
// An extend invoked after the latest end those allow (plus LateExtendSlackMS),
// or after every partition of its lease was released by an ack's answer,
// and answered renewed, is a violation.
func CheckLateExtends(h []Event, _ Spec) []Violation {
	type lease struct {
		okVT  int64
		secs  int
		parts map[string]bool
	}
	leases := map[string]*lease{}
	// released: lease -> partition -> index of the first ack answer that
	// released the lease there.
	released := map[string]map[string]int{}
	// ends: lease -> the latest end its extends so far may have given it.
	ends := map[string]int64{}
	var out []Violation
	for _, c := range calls(h) {
		if c.in.Foreign || c.done == nil {
			continue // the tenant rule judges foreign calls
		}
		switch c.in.Op {
		case "pop":
			if !c.ok() || c.in.Status == "autoack" {
				continue
			}
			for _, m := range c.done.Msgs {
				if m.Lease == "" {
					continue
				}
				l := leases[m.Lease]
				if l == nil {
					l = &lease{okVT: c.done.VT, secs: c.in.LeaseSecs, parts: map[string]bool{}}
					leases[m.Lease] = l
				}
				l.parts[m.Partition] = true
			}
		case "ack":
			if !c.ok() {
				continue
			}
			for _, m := range c.done.Msgs {
				if m.OK && m.Released && m.Lease != "" {
					if released[m.Lease] == nil {
						released[m.Lease] = map[string]int{}
					}
					if _, ok := released[m.Lease][m.Partition]; !ok {
						released[m.Lease][m.Partition] = c.done.Index
					}
				}
			}
		case "extend":
			l := leases[c.in.Lease]
			if l == nil {
				continue
			}
			end := max(l.okVT+int64(l.secs)*1000, ends[c.in.Lease])
			renewed := c.ok() && c.done.Status == "renewed"
			if renewed {
				why := ""
				switch {
				case c.in.VT > end+LateExtendSlackMS:
					why = fmt.Sprintf("its lease ended by vt %d at the latest", end)
				case allReleased(l.parts, released[c.in.Lease], c.in.Index):
					why = "an ack had released every partition of its lease"
				}
				if why != "" {
					out = append(out, Violation{"late-extend", fmt.Sprintf("extend of lease %s invoked at vt %d (event %d) answered renewed, but %s",
						c.in.Lease, c.in.VT, c.in.Index, why)})
				}
			}
			if renewed || c.done.Kind == KInfo {
				ends[c.in.Lease] = max(ends[c.in.Lease], c.done.VT+int64(c.in.LeaseSecs)*1000)
			}
		}
	}
	return limit(out, 20)
}

// LateExtendSlackMS is how far past a lease's latest end an extend must be
// invoked before its renewal is judged (virtual time: ms rounding only).
const LateExtendSlackMS = 100

// allReleased reports whether every partition in parts was released by an
// ack answered before event i.
func allReleased(parts map[string]bool, released map[string]int, i int) bool {
	if len(parts) == 0 {
		return false
	}
	for p := range parts {
		at, ok := released[p]
		if !ok || at >= i {
			return false
		}
	}
	return true
}
