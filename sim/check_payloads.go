package sim

import "fmt"

// CheckPayloads: every payload delivered is the payload written for its
// message (writtenPayload of its transactionId; a message retried from the
// DLQ, "sealed-retry", carries its original's), whichever path wrote it: a
// push, a transaction, a timer's fire, a spool replay, a DLQ retry. Above
// all never an encryption envelope: a payload sealed once more than the
// pop opened it (a twice-sealed row, or a sealed one handed out unopened).
// A pop records a delivery's data only when it is not the payload written
// (deliveredAs). And every write of the sealed-paths probe answered ok, and
// every DLQ retry of it, was delivered by the final drain: the rule cannot
// pass by never seeing a payload of SealedQueue.
func CheckPayloads(h []Event, _ Spec) []Violation {
	orig := map[Key]string{}
	for _, c := range calls(h) {
		if c.in.Op == "sealed-retry" && c.ok() && c.done.Status != "" {
			orig[Key{c.in.Tenant, c.in.Queue, c.in.Partition, c.done.Status}] = c.in.Txid
		}
	}
	var out []Violation
	delivered := map[Key]bool{}
	for _, c := range calls(h) {
		if (c.in.Op != "pop" && c.in.Op != "sealed-pop") || !c.ok() {
			continue
		}
		for _, m := range c.done.Msgs {
			k := m.Key()
			if k.Tenant == "" {
				k.Tenant = c.in.Tenant
			}
			delivered[k] = true
			if m.Data == nil {
				continue
			}
			want := k.Txid
			if o, ok := orig[k]; ok {
				want = o
			}
			if samePayload(m.Data, want) {
				continue
			}
			what := fmt.Sprintf("delivered %s, not the payload written %s", clip(m.Data), writtenPayload(want))
			if sealedEnvelope(m.Data) {
				what = fmt.Sprintf("delivered as an encryption envelope (sealed once more than the pop opened it): %s", clip(m.Data))
			}
			out = append(out, Violation{"payloads", fmt.Sprintf("%s (event %d) %s", k, c.done.Index, what)})
		}
	}
	if finalEvent(h) != nil {
		for _, c := range calls(h) {
			if (c.in.Op != "sealed-write" && c.in.Op != "sealed-retry") || !c.ok() || c.done.Bad != "" {
				continue
			}
			k, how := c.in.Key(), c.in.What
			if c.in.Op == "sealed-retry" {
				k.Txid, how = c.done.Status, "a DLQ retry of "+c.in.Txid
			}
			if k.Txid != "" && !delivered[k] {
				out = append(out, Violation{"payloads", fmt.Sprintf("%s was written (%s, event %d) and never delivered by the final drain", k, how, c.done.Index)})
			}
		}
	}
	return limit(out, 20)
}
