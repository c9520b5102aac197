package sim

import "fmt"

// CheckRedelivery: a failed or retry ack that succeeded without moving the
// message to the DLQ gives it back: the message is delivered again later in
// that group (answered after the ack was sent), or the final read finds it
// dead-lettered there. A failed ack that moved the cursor like a completion
// would otherwise pass every other property, since the final read takes a
// cursor past a delivered message as completed.
func CheckRedelivery(h []Event, s Spec) []Violation {
	t := build(h)
	dlq := map[string]map[Key]bool{}
	for _, r := range t.rows {
		for _, g := range r.DLQBy {
			if dlq[g] == nil {
				dlq[g] = map[Key]bool{}
			}
			dlq[g][Key{r.Tenant, r.Queue, r.Partition, r.Txid}] = true
		}
	}
	var out []Violation
	for _, c := range calls(h) {
		if c.in.Op != "ack" || c.in.Foreign || !c.ok() {
			continue
		}
		group := c.in.Group
		if group == "" {
			group = QueueMode
		}
		for _, m := range c.done.Msgs {
			st := normStatus(m.Status)
			if !m.OK || m.DLQ || (st != "failed" && st != "retry") {
				continue
			}
			k := m.Key()
			again := dlq[group][k]
			for _, d := range t.deliveries {
				if d.key == k && d.group == group && d.okI > c.in.Index {
					again = true
					break
				}
			}
			if !again && !t.evictable(k, h[len(h)-1].VT, s) {
				out = append(out, Violation{"redelivery", fmt.Sprintf("%s acked %s in group %s (event %d) and never delivered again nor dead-lettered", k, st, group, c.done.Index)})
			}
		}
	}
	return limit(out, 20)
}
