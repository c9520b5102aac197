package sim

import "fmt"

// CheckSpoolExclusive (spool-exclusive): a second open of a running
// broker's spool directory is refused. Two spools on one directory lose
// buffered pushes: one finalizes and drains the file the other appends to.
func CheckSpoolExclusive(h []Event, _ Spec) []Violation {
	var out []Violation
	for _, e := range h {
		if e.Kind == KFault && e.Fault == FSecondSpool && e.Status == "opened" {
			out = append(out, Violation{"spool-exclusive", fmt.Sprintf("a second spool opened broker %d's spool directory while it ran (event %d, vt %d)", e.Broker, e.Index, e.VT)})
		}
	}
	return limit(out, 20)
}
