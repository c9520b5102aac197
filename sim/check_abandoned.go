package sim

import "fmt"

// CheckAbandonedClaims: a pop claims nothing for a client that has gone.
// The broker reports each claim that began after its request's context
// was done (KClaim events); the release that follows such a claim gives
// it back, so delivery alone cannot show it, but the partition was hidden
// from every other consumer meanwhile, for nobody.
func CheckAbandonedClaims(h []Event, _ Spec) []Violation {
	var out []Violation
	for _, e := range h {
		if e.Kind == KClaim && e.What == "client-gone" {
			out = append(out, Violation{"abandoned-claims", fmt.Sprintf("broker %d claimed %s (lease %s) for a pop whose client had already gone",
				e.Broker, e.Queue, e.Lease)})
		}
	}
	return limit(out, 20)
}
