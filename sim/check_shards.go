package sim

import "fmt"

// CheckShardOverlap: no partition has committed rows on two shards in
// overlapping epochs. The final read of a shard world lists the moved
// queue's rows (by message id and by partition and seq) found on both
// the source and the destination while the source's queue row was not a
// tombstone; each is a violation. Runs without shards find none.
func CheckShardOverlap(h []Event, _ Spec) []Violation {
	var out []Violation
	for _, e := range h {
		if e.Kind != KFinal {
			continue
		}
		for _, k := range e.Overlap {
			out = append(out, Violation{"shard-overlap", fmt.Sprintf("%s is on both shards and the source is no tombstone", k)})
		}
	}
	return out
}
