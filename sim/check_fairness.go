package sim

import "fmt"

// CheckFairness: a wildcard pop serves partitions least-recently-claimed
// first, so a partition with a message waiting is served before any other
// partition of its queue is served twice. From the moment a push into
// partition Y is answered queued until that message's first delivery in a
// group, at most (partitions of the queue) successful pops of that group
// and queue in a row may serve other partitions while Y is claimable (no
// live lease of that group holds it); a pop that serves Y starts the count
// again. A message that may have been evicted stops waiting; pops while
// delayedProcessing or windowBuffer may hide it do not count (check_qopts.go). More means Y was starved: with steady traffic into one partition,
// the others would never be served.
func CheckFairness(h []Event, s Spec) []Violation {
	t := build(h)
	t.hide = newHiding(h, s)
	type pk struct{ tenant, q, p, g string }
	// Successful non-empty pops, in order, with the partitions they served.
	type served struct {
		invokeI int
		vt      int64
		tenant  string
		q, g    string
		parts   map[string]bool
		// suspended: a lost or overlapping pop of this group may hold a
		// claim the history cannot see; the pop does not count, but
		// still resets.
		suspended bool
	}
	var pops []served
	// A pop whose answer was lost may hold a claim the history cannot
	// see, until its lease ends: no pop of its group counts before that.
	unknownUntil := map[[3]string]int64{}
	// Pops of one group that overlap in time (free-running runs) may each
	// have found the other's claim in flight: an overlapped pop does not
	// count. Lockstep runs have no overlaps.
	type span struct{ from, to int }
	spans := map[[3]string][]span{}
	all := calls(h)
	for _, c := range all {
		if c.in.Op == "pop" {
			to := len(h)
			if c.done != nil {
				to = c.done.Index
			}
			k := [3]string{c.in.Tenant, c.in.Queue, groupOf(c.in.Group)}
			spans[k] = append(spans[k], span{c.in.Index, to})
		}
	}
	overlapped := func(k [3]string, from, to int) bool {
		for _, o := range spans[k] {
			if o.from != from && o.from < to && from < o.to {
				return true
			}
		}
		return false
	}
	for _, c := range all {
		if c.in.Op != "pop" {
			continue
		}
		if !c.ok() {
			k := [3]string{c.in.Tenant, c.in.Queue, groupOf(c.in.Group)}
			unknownUntil[k] = max(unknownUntil[k], c.in.VT+int64(c.in.LeaseSecs)*1000+2000)
			continue
		}
		if len(c.done.Msgs) == 0 || c.in.Partition != "" {
			continue
		}
		k := [3]string{c.in.Tenant, c.in.Queue, groupOf(c.in.Group)}
		sv := served{invokeI: c.in.Index, vt: c.in.VT, tenant: c.in.Tenant, q: c.in.Queue, g: groupOf(c.in.Group), parts: map[string]bool{},
			suspended: c.in.VT < unknownUntil[k] || overlapped(k, c.in.Index, c.done.Index)}
		for _, m := range c.done.Msgs {
			sv.parts[m.Partition] = true
		}
		pops = append(pops, sv)
	}
	firstDelivery := map[[2]string]int{} // key+group -> okI of its first delivery
	for _, d := range t.deliveries {
		id := [2]string{d.key.String(), d.group}
		if _, ok := firstDelivery[id]; !ok {
			firstDelivery[id] = d.okI
		}
	}
	reported := map[pk]bool{}
	var out []Violation
	for _, p := range t.pushes {
		if p.status != "queued" {
			continue
		}
		groups := s.Groups[p.key.Q]
		if len(groups) == 0 {
			groups = []string{QueueMode}
		}
		bound := s.Partitions[p.key.Q]
		if bound == 0 {
			continue
		}
		for _, g := range groups {
			id := pk{p.key.Tenant, p.key.Q, p.key.P, g}
			if reported[id] {
				continue
			}
			until, ok := firstDelivery[[2]string{p.key.String(), g}]
			if !ok {
				until = len(h)
			}
			skipped, worst := 0, 0
			for _, sv := range pops {
				if sv.invokeI <= p.okI || sv.invokeI >= until {
					continue
				}
				if sv.g != g || sv.q != p.key.Q || sv.tenant != p.key.Tenant {
					continue
				}
				if sv.parts[p.key.P] {
					// The partition was served (its earlier messages):
					// it is not starved; count again from here.
					skipped = 0
					continue
				}
				if t.evictable(p.key, sv.vt, s) {
					break // it may be gone: nothing waits any longer
				}
				if sv.suspended || t.partitionLeased(p.key, g, sv.invokeI, sv.vt) || t.hide.hidden(p.key, sv.vt, sv.vt) {
					continue
				}
				skipped++
				worst = max(worst, skipped)
			}
			if worst > bound {
				reported[id] = true
				out = append(out, Violation{"fairness", fmt.Sprintf("%s waited while %d pops in a row of group %s served other partitions of %s (at most %d may)",
					p.key, worst, g, p.key.Q, bound)})
			}
		}
	}
	return limit(out, 20)
}

// partitionLeased reports whether, at event index i and time vt, k's
// partition is held in group g by a live lease.
func (t *timeline) partitionLeased(k Key, g string, i int, vt int64) bool {
	return t.leasedExcept(k, g, "", i, vt)
}

// leasedExcept reports whether, at event index i and time vt, k's
// partition is held in group g by a live lease other than except: a
// delivery from it whose lease has not expired and is not known to be
// released. Only a release whose answer arrived before i counts: an ack
// whose answer was lost (a refused connection, say) may never have
// happened, so the lease may still hold the partition.
func (t *timeline) leasedExcept(k Key, g, except string, i int, vt int64) bool {
	for _, o := range t.deliveries {
		if o.okI >= i || o.group != g || o.lease == "" || o.lease == except || o.autoAck ||
			o.key.Tenant != k.Tenant || o.key.Q != k.Q || o.key.P != k.P {
			continue
		}
		at, released := t.released[o.lease]
		if !(released && at < i) && t.leaseEnd(o, i) > vt {
			return true
		}
	}
	return false
}
