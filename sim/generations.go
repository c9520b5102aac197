package sim

import "fmt"

// Generations tells apart the lives of a transactionId on a queue with
// completed retention or eviction. Dedup reaches as far as the rows do:
// once every group completed a message and retention may have deleted it,
// or it waited maxWait and eviction may have, a resend of its
// transactionId is legitimately stored again, as a new message. Such a
// resend, answered queued (or left indeterminate), starts a new
// generation: it and every later delivery, ack and final row of the key
// get the txid "<txid>~<n>", so each checker sees two messages, not one
// stored twice. A resend answered queued before the old message could have
// been deleted keeps its txid, and the dedup checker rejects it.
//
// The history is returned as it is when no queue has retention or
// eviction.
func Generations(h []Event, s Spec) []Event {
	if len(s.RetentionMS) == 0 && len(s.MaxWaitMS) == 0 {
		return h
	}
	type life struct {
		gen       int
		createdVT int64
		done      map[string]int // group -> answer index of its completion
	}
	lives := map[Key]*life{}
	leaseGen := map[[2]string]int{} // (lease, txid) -> generation delivered
	out := append([]Event(nil), h...)
	byCall := map[int][]int{} // call -> indexes of its events in out
	for i, e := range out {
		if e.Call != 0 {
			byCall[e.Call] = append(byCall[e.Call], i)
		}
	}
	label := func(txid string, gen int) string {
		if gen == 0 {
			return txid
		}
		return fmt.Sprintf("%s~%d", txid, gen)
	}
	// relabel rewrites the txid of key k in the message lists of a call's
	// events (invoke and completion) to generation gen; lease, when set,
	// limits it to items of that lease.
	relabel := func(call int, k Key, gen int, lease string) {
		for _, i := range byCall[call] {
			e := &out[i]
			if e.Key() == k {
				e.Txid = label(k.Txid, gen)
			}
			msgs := append([]Msg(nil), e.Msgs...)
			for j := range msgs {
				m := &msgs[j]
				t := m.Tenant
				if t == "" {
					t = e.Tenant
				}
				if (Key{t, m.Queue, m.Partition, m.Txid}) == k && (lease == "" || m.Lease == lease) {
					m.Txid = label(k.Txid, gen)
				}
			}
			e.Msgs = msgs
		}
	}
	eligible := func(l *life, q string, c *call) bool {
		if w := s.MaxWaitMS[q]; w > 0 && c.in.VT+s.SkewMS >= l.createdVT+w {
			return true // may have been evicted, consumed or not
		}
		if s.RetentionMS[q] == 0 {
			return false
		}
		for _, g := range groupsOf(s, q) {
			if at, ok := l.done[g]; !ok || at > c.in.Index {
				return false
			}
		}
		return c.in.VT+s.SkewMS >= l.createdVT+s.RetentionMS[q]
	}
	push := func(c *call, k Key, answered string) {
		if s.RetentionMS[k.Q] == 0 && s.MaxWaitMS[k.Q] == 0 {
			return
		}
		l := lives[k]
		if l == nil {
			lives[k] = &life{createdVT: c.in.VT, done: map[string]int{}}
			return
		}
		stored := c.done == nil || c.done.Kind == KInfo || answered == "queued"
		if stored && eligible(l, k.Q, c) {
			l.gen++
			l.createdVT, l.done = c.in.VT, map[string]int{}
		}
		relabel(c.in.Call, k, l.gen, "")
	}
	complete := func(c *call, g string, m Msg, tenant string) {
		k := Key{tenant, m.Queue, m.Partition, m.Txid}
		if m.Tenant != "" {
			k.Tenant = m.Tenant
		}
		l := lives[k]
		if l == nil {
			return
		}
		gen, ok := leaseGen[[2]string{m.Lease, m.Txid}]
		if !ok {
			gen = l.gen
		}
		relabel(c.in.Call, k, gen, m.Lease)
		st := normStatus(m.Status)
		if gen == l.gen && c.ok() && (m.OK || c.in.Op == "txn") && (st == "completed" || st == "dlq" || m.DLQ) {
			if _, seen := l.done[g]; !seen {
				l.done[g] = c.done.Index
			}
		}
	}
	for _, c := range calls(out) {
		in := c.in
		if in.Foreign {
			continue
		}
		switch in.Op {
		case "push":
			st := ""
			if c.ok() {
				st = c.done.Status
			}
			push(c, in.Key(), st)
		case "pop":
			if !c.ok() {
				continue
			}
			g := groupOf(in.Group)
			for _, m := range c.done.Msgs {
				k := m.Key()
				if k.Tenant == "" {
					k.Tenant = in.Tenant
				}
				l := lives[k]
				if l == nil {
					continue
				}
				leaseGen[[2]string{m.Lease, m.Txid}] = l.gen
				relabel(in.Call, k, l.gen, m.Lease)
				if in.Status == "autoack" {
					if _, seen := l.done[g]; !seen {
						l.done[g] = c.done.Index
					}
				}
			}
		case "ack":
			if c.done == nil || c.done.Kind == KFail {
				continue
			}
			items := in.Msgs
			if c.ok() {
				items = c.done.Msgs
			}
			for _, m := range items {
				complete(c, groupOf(in.Group), m, in.Tenant)
			}
		case "txn":
			for _, m := range in.Msgs {
				switch m.Op {
				case "push":
					st := ""
					if c.ok() && c.done.Status == "committed" {
						st = "queued"
						if m.Status == "duplicate" {
							st = "duplicate"
						}
					}
					k := m.Key()
					if k.Tenant == "" {
						k.Tenant = in.Tenant
					}
					push(c, k, st)
				case "ack":
					complete(c, groupOf(in.Group), m, in.Tenant)
				}
			}
		}
	}
	for i := range out {
		if out[i].Kind != KFinal {
			continue
		}
		rows := append([]Row(nil), out[i].Rows...)
		for j := range rows {
			if l := lives[Key{rows[j].Tenant, rows[j].Queue, rows[j].Partition, rows[j].Txid}]; l != nil {
				rows[j].Txid = label(rows[j].Txid, l.gen)
			}
		}
		out[i].Rows = rows
	}
	return out
}

// groupsOf is the groups that consume q (queue mode when none is listed).
func groupsOf(s Spec, q string) []string {
	if g := s.Groups[q]; len(g) > 0 {
		return g
	}
	return []string{QueueMode}
}
