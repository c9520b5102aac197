package sim

import (
	"fmt"
)

// FCorrupted is the fault event naming one spooled record that
// spool.corrupt damaged on disk (its key, and B its broker).
const FCorrupted = "spool.corrupted"

// corruptSpools (spool.corrupt) rots one record of a finalized spool file
// on each of f's brokers, while the database is down (the generator
// schedules it inside an outage). It pushes Count records (4 by default)
// through the broker, recorded as any client's pushes, so they are
// buffered into one file; finalizes that file with the damage armed, so
// no drain reads it intact; and records which record was damaged. The
// damaged record has records after it: a checksum failure there is
// corruption, not a torn tail, and the drain must store every other record
// and quarantine the damaged one with its reason, never drop the rest.
func (r *runner) corruptSpools(f FaultAt) {
	n := f.Count
	if n < 2 {
		n = 4
	}
	for _, b := range r.brokersOf(f) {
		br := r.cluster.Broker(b)
		if br == nil || br.Spool() == nil {
			r.starved = append(r.starved, fmt.Sprintf("spool.corrupt at=%v broker=%d: the broker was not up", f.At, b))
			continue
		}
		fs := r.cluster.SpoolFS(b)
		fs.CorruptNextFinalized(1)
		for i := 0; i < n; i++ {
			k := Key{Tenant: r.o.Tenants[0], Q: r.o.Queues[0].Name, P: "p0",
				Txid: fmt.Sprintf("s%x-corrupt-b%d-%d-%d", r.o.Seed&0xffff, b, r.vt(), i)}
			r.act.push(r.ctx, 0, b, k)
		}
		_ = br.Spool().Finalize()
		fs.CorruptNextFinalized(0)
		got := fs.TakeCorrupted()
		if len(got) == 0 {
			r.starved = append(r.starved, fmt.Sprintf("spool.corrupt at=%v broker=%d: no finalized file held two records (were the pushes buffered?)", f.At, b))
		}
		for _, c := range got {
			ev := c.Event
			r.hist.Add(Event{Kind: KFault, Fault: FCorrupted, Broker: b, VT: r.vt(), Tenant: ev.TenantOrDefault(), Queue: ev.Queue, Partition: ev.Partition, Txid: ev.TransactionID})
		}
	}
}

// corruptedKeys are the keys whose spooled record spool.corrupt damaged.
func corruptedKeys(h []Event) map[Key]bool {
	out := map[Key]bool{}
	for _, e := range h {
		if e.Kind == KFault && e.Fault == FCorrupted {
			out[e.Key()] = true
		}
	}
	return out
}

// CheckSpoolCorrupt: a spooled record damaged on disk (spool.corrupt) is
// stored anyway (a copy of it was) or quarantined with a reason on its
// broker: an entry of that broker's failed/ naming its key, or naming no
// key at all (a record too damaged to name), each such entry accounting
// for one record. The records around it are buffered pushes like any
// other: no-loss holds the drain to storing them.
func CheckSpoolCorrupt(h []Event, _ Spec) []Violation {
	final := finalEvent(h)
	if final == nil {
		return nil
	}
	stored := map[Key]bool{}
	for _, r := range final.Rows {
		stored[Key{r.Tenant, r.Queue, r.Partition, r.Txid}] = true
	}
	named := map[int]map[Key]bool{}
	anonymous := map[int]int{}
	for _, q := range final.Quarantined {
		switch {
		case q.Reason == "":
		case q.Q == "" && q.Txid == "":
			anonymous[q.B]++
		default:
			if named[q.B] == nil {
				named[q.B] = map[Key]bool{}
			}
			named[q.B][q.Key] = true
		}
	}
	var out []Violation
	for _, e := range h {
		if e.Kind != KFault || e.Fault != FCorrupted {
			continue
		}
		k := e.Key()
		switch {
		case stored[k], named[e.Broker][k]:
		case anonymous[e.Broker] > 0:
			anonymous[e.Broker]--
		default:
			out = append(out, Violation{"spool-corrupt", fmt.Sprintf("%s, buffered by broker %d and damaged on disk, was neither stored nor quarantined with a reason: dropped silently",
				k, e.Broker)})
		}
	}
	return limit(out, 20)
}
