package sim

import "fmt"

// CheckTenant: a pop under tenant T returns only messages pushed under T,
// the final read finds every row under the tenant it was pushed as, and an
// ack or extend sent under another tenant than its lease's (with a valid
// lease id) never succeeds.
func CheckTenant(h []Event, _ Spec) []Violation {
	t := build(h)
	var out []Violation
	for _, d := range t.deliveries {
		tenants := t.pushTenants[[3]string{d.key.Q, d.key.P, d.key.Txid}]
		if !tenants[d.key.Tenant] {
			out = append(out, Violation{"tenant", fmt.Sprintf("pop under tenant %s (event %d) returned %s/%s/%s, pushed under %v", d.key.Tenant, d.okI, d.key.Q, d.key.P, d.key.Txid, keysOf(tenants))})
		}
	}
	for _, c := range t.foreign {
		if !c.ok() {
			continue
		}
		if c.done.Status == "renewed" {
			out = append(out, Violation{"tenant", fmt.Sprintf("extend of lease %s under tenant %s (event %d), not the lease's, renewed it", c.in.Lease, c.in.Tenant, c.done.Index)})
		}
		for _, m := range c.done.Msgs {
			if m.OK {
				out = append(out, Violation{"tenant", fmt.Sprintf("ack of %s/%s/%s under tenant %s (event %d), not the message's, succeeded", m.Queue, m.Partition, m.Txid, c.in.Tenant, c.done.Index)})
			}
		}
	}
	for _, r := range t.rows {
		tenants := t.pushTenants[[3]string{r.Queue, r.Partition, r.Txid}]
		if len(tenants) > 0 && !tenants[r.Tenant] {
			out = append(out, Violation{"tenant", fmt.Sprintf("row %s/%s/%s stored under tenant %s, pushed under %v", r.Queue, r.Partition, r.Txid, r.Tenant, keysOf(tenants))})
		}
	}
	return limit(out, 20)
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
