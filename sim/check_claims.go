package sim

import "fmt"

// claimSlackMS covers the time between a claim statement and the moment
// its claim is recorded, on a loaded machine.
const claimSlackMS = 1000

// CheckClaims: no sweeper claims a timer while another claim on it is live.
// A claim lives from its record until it ended (the timer fired, or its
// failure was recorded and the claim given up) or its lease
// (QUEEN_SWEEPER_LEASE_MS) ran out; a claim taken before then by another
// token means a sweeper ignored claimed_until. Delivery alone cannot show
// this: the later claim's token is the one the fire needs, so the timer
// still fires once.
func CheckClaims(h []Event, _ Spec) []Violation {
	var out []Violation
	live := map[[2]string]map[string]int64{} // (tenant, key) -> token -> claimed at
	lease := SweeperLease.Milliseconds()
	for _, e := range h {
		if e.Kind != KSweep {
			continue
		}
		k := [2]string{e.Tenant, e.Txid}
		switch e.What {
		case "claim":
			for token, at := range live[k] {
				if token != e.Lease && e.VT < at+lease-claimSlackMS {
					out = append(out, Violation{"timer-claims", fmt.Sprintf("%s/%s claimed by broker %d (event %d) %d ms after another claim that was still live (its lease is %d ms)",
						e.Tenant, e.Txid, e.Broker, e.Index, e.VT-at, lease)})
				}
			}
			if live[k] == nil {
				live[k] = map[string]int64{}
			}
			live[k][e.Lease] = e.VT
		case "fired", "failed":
			delete(live[k], e.Lease)
		}
	}
	return limit(out, 20)
}
