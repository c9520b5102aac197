package sim

import (
	"fmt"

	"github.com/queen-go/queen/queen/limits"
)

// CheckQuarantine: a spool drain quarantines only records the broker's edge
// would have refused had the database answered (queen/limits): one whose
// names are all within the limits was acknowledged "buffered" and then
// dropped (a payload PostgreSQL refuses that the edge let through, a batch
// quarantined whole for one poison record). A record damaged on disk
// (spool.corrupt) is the spool-corrupt rule's.
func CheckQuarantine(h []Event, _ Spec) []Violation {
	final := finalEvent(h)
	if final == nil {
		return nil
	}
	var out []Violation
	corrupted := corruptedKeys(h)
	for _, q := range final.Quarantined {
		// A record spool.corrupt damaged, named or too damaged to name
		// (no key): the spool-corrupt rule accounts for those.
		damaged := corrupted[q.Key] || (len(corrupted) > 0 && q.Q == "" && q.Txid == "")
		if !edgeRefuses(q.Key) && !damaged {
			out = append(out, Violation{"quarantine", fmt.Sprintf("%s was quarantined (%s) though the edge would have taken it: a buffered push dropped", q.Key, q.Reason)})
		}
	}
	return limit(out, 20)
}

// edgeRefuses reports whether the push route refuses a record's names.
func edgeRefuses(k Key) bool {
	return limits.Queue.Check("", k.Q) != nil || limits.Partition.Check("", k.P) != nil ||
		limits.TransactionID.Check("", k.Txid) != nil
}
