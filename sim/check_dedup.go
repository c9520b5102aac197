package sim

import "fmt"

// CheckDedup: a (partition, transactionId) is stored at most once (final
// read), and at most one push of it is answered "queued"; every repeat,
// including a spool replay, answers duplicate and writes nothing.
func CheckDedup(h []Event, _ Spec) []Violation {
	t := build(h)
	var out []Violation
	for _, k := range sortedKeys(t.queuedOK) {
		if n := t.queuedOK[k]; n > 1 {
			out = append(out, Violation{"dedup", fmt.Sprintf("%s answered queued %d times", k, n)})
		}
	}
	for _, r := range t.rows {
		if r.Count > 1 {
			out = append(out, Violation{"dedup", fmt.Sprintf("%s/%s/%s/%s stored %d times", r.Tenant, r.Queue, r.Partition, r.Txid, r.Count)})
		}
	}
	return limit(out, 20)
}
