package sim

import "fmt"

// CheckLiveness: a pop never comes back empty while a message its group
// has never been given waits in a partition nobody may hold. "Nobody may
// hold" discounts every lease the history shows live (until its end plus
// the recovery slack, counting answered and unanswered renewals), every pop
// whose answer was lost (it may hold an unknown lease for a whole lease),
// and every pop whose client left while it claimed (it may hold one for the
// recovery slack only: the broker must give such a claim back at once).
// Pops during a fault, or within answerGrace of one, are not judged.
//
// Messages that may have been evicted (maxWaitTimeSeconds), or that
// delayedProcessing or windowBuffer may hide (check_qopts.go), do not count.
// Only messages never delivered in the group count: a delivered one is the
// business of the lease-recovery and no-loss checkers, and a later
// completion may have moved the cursor past it.
func CheckLiveness(h []Event, s Spec) []Violation {
	t := build(h)
	t.hide = newHiding(h, s)
	calls := calls(h)
	type window struct{ from, to int64 }
	var faults []window
	for _, e := range h {
		switch e.Kind {
		case KFault:
			faults = append(faults, window{e.VT, max(e.Until, e.VT) + answerGrace})
		case KBroker:
			faults = append(faults, window{e.VT, e.VT + answerGrace})
		}
	}
	inFault := func(vt int64) bool {
		for _, f := range faults {
			if vt >= f.from && vt <= f.to {
				return true
			}
		}
		return false
	}
	maybeRenewed := map[string]int64{} // lease -> latest end an unanswered renewal may have set
	for _, c := range calls {
		if c.in.Op == "extend" && !c.in.Foreign && c.done != nil && c.done.Kind == KInfo {
			maybeRenewed[c.in.Lease] = max(maybeRenewed[c.in.Lease], c.in.VT+int64(c.in.LeaseSecs)*1000)
		}
	}
	// A lease counts as given back only once the answer of the ack that
	// released it arrived (t.released; the opposite of no-double-delivery's
	// caution).
	released := t.released
	var out []Violation
	for _, c := range calls {
		if c.in.Op != "pop" || !c.ok() || len(c.done.Msgs) > 0 || c.done.Bad != "" || inFault(c.in.VT) {
			continue
		}
		if k, ok := t.waiting(c, calls, released, maybeRenewed, s); ok {
			out = append(out, Violation{"liveness", fmt.Sprintf("pop of group %s (event %d, vt %d) answered empty while %s waited, never given to the group, in a partition nobody held",
				groupOf(c.in.Group), c.done.Index, c.in.VT, k)})
		}
	}
	return limit(out, 20)
}

// waiting finds a message the empty pop p should have been able to get.
func (t *timeline) waiting(p *call, calls []*call, released map[string]int, maybeRenewed map[string]int64, spec Spec) (Key, bool) {
	slack := spec.RecoverySlackMS
	g, i, vt := groupOf(p.in.Group), p.in.Index, p.in.VT
	if t.unknownHolder(p, calls, slack) {
		return Key{}, false
	}
	for _, pr := range t.pushes {
		k := pr.key
		if pr.okI >= i || (pr.status != "queued" && pr.status != "duplicate") ||
			k.Tenant != p.in.Tenant || k.Q != p.in.Queue || (p.in.Partition != "" && k.P != p.in.Partition) {
			continue
		}
		if t.evictable(k, vt, spec) || t.hide.hidden(k, vt, p.done.VT) || !t.lateExpectsAt(k, g, i) || t.deliveredBefore(k, g, i) || t.maybeCompleted(k, g, i, calls) || t.partitionHeld(k, g, i, vt, slack, released, maybeRenewed) {
			continue
		}
		return k, true
	}
	return Key{}, false
}

// unknownHolder reports whether an earlier pop of p's group and queue
// whose answer never came may still hold a lease at p's time.
func (t *timeline) unknownHolder(p *call, calls []*call, slack int64) bool {
	for _, c := range calls {
		if c.in.Op != "pop" || c.in.Index >= p.in.Index || c.ok() || c.in.Tenant != p.in.Tenant || c.in.Queue != p.in.Queue ||
			groupOf(c.in.Group) != groupOf(p.in.Group) {
			continue
		}
		hold := int64(c.in.LeaseSecs)*1000 + slack
		if c.done != nil && c.done.Err == Cancelled {
			hold = slack
		}
		if c.in.VT+hold > p.in.VT {
			return true
		}
	}
	return false
}

func (t *timeline) deliveredBefore(k Key, g string, i int) bool {
	for _, d := range t.deliveries {
		if d.key == k && d.group == g && d.invokeI < i {
			return true
		}
	}
	return false
}

// maybeCompleted: completed in g before i, or named by an ack or
// transaction of g whose answer was lost.
func (t *timeline) maybeCompleted(k Key, g string, i int, calls []*call) bool {
	for _, c := range t.completions {
		if c.key == k && c.group == g && c.invokeI < i {
			return true
		}
	}
	for _, c := range calls {
		if (c.in.Op != "ack" && c.in.Op != "txn") || c.in.Foreign || c.in.Index >= i || c.ok() || groupOf(c.in.Group) != g {
			continue
		}
		if refusedEdge(c) {
			continue // past a limit and refused: none of it applied (the edges rule)
		}
		for _, m := range c.in.Msgs {
			if m.Key() == k {
				return true
			}
		}
	}
	return false
}

// partitionHeld: a lease the history shows on k's partition in g may be
// live at vt (its end plus slack, renewals counted, no release answered
// before i).
func (t *timeline) partitionHeld(k Key, g string, i int, vt, slack int64, released map[string]int, maybeRenewed map[string]int64) bool {
	for _, o := range t.deliveries {
		if o.invokeI >= i || o.group != g || o.lease == "" || o.autoAck ||
			o.key.Tenant != k.Tenant || o.key.Q != k.Q || o.key.P != k.P {
			continue
		}
		if at, ok := released[o.lease]; ok && at < i {
			continue
		}
		if max(t.leaseEnd(o, i), maybeRenewed[o.lease])+slack > vt {
			return true
		}
	}
	return false
}
