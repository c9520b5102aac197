package sim_test

import (
	"slices"
	"testing"

	"github.com/queen-go/queen/sim"
)

// Cover reads a history's cells from its events alone: the queue's
// options when a message was written, the path that wrote it, how it was
// consumed, and the faults active meanwhile.
func TestCoverReadsCellsFromTheHistory(t *testing.T) {
	m := sim.Msg{Tenant: "t1", Queue: "q", Partition: "p0", Txid: "a", Lease: "L1"}
	h := []sim.Event{
		{Kind: sim.KQueue, Tenant: "t1", Queue: "q", VT: 0},
		{Kind: sim.KInvoke, Call: 1, Op: "push", VT: 10, Tenant: "t1", Queue: "q", Partition: "p0", Txid: "a"},
		{Kind: sim.KOK, Call: 1, Op: "push", VT: 11, Code: 201, Status: "queued"},
		{Kind: sim.KQueue, Tenant: "t1", Queue: "q", VT: 20, What: "retention,encrypted"},
		{Kind: sim.KFault, Fault: "pg.reset", VT: 25, Broker: -1},
		{Kind: sim.KInvoke, Call: 2, Op: "push", VT: 30, Tenant: "t1", Queue: "q", Partition: "p0", Txid: "b"},
		{Kind: sim.KOK, Call: 2, Op: "push", VT: 31, Code: 201, Status: "queued"},
		{Kind: sim.KInvoke, Call: 3, Op: "pop", VT: 40, Tenant: "t1", Queue: "q", Group: "g", LeaseSecs: 5},
		{Kind: sim.KOK, Call: 3, Op: "pop", VT: 41, Code: 200, Msgs: []sim.Msg{m, {Tenant: "t1", Queue: "q", Partition: "p0", Txid: "b", Lease: "L1"}}},
		{Kind: sim.KInvoke, Call: 4, Op: "extend", VT: 9000, Tenant: "t1", Lease: "L1", LeaseSecs: 30},
		{Kind: sim.KOK, Call: 4, Op: "extend", VT: 9001, Code: 200},
		{Kind: sim.KInvoke, Call: 5, Op: "ack", VT: 9100, Tenant: "t1", Queue: "q", Group: "g", Msgs: []sim.Msg{m}},
		{Kind: sim.KOK, Call: 5, Op: "ack", VT: 9101, Code: 200, Msgs: []sim.Msg{{Tenant: "t1", Queue: "q", Partition: "p0", Txid: "a", OK: true, DLQ: true}}},
	}
	cov := sim.Cover(h)
	want := []string{
		"write=push x queue=plain", "write=push x queue=retention", "write=push x queue=encrypted",
		"consume=group x queue=plain", "consume=group x queue=encrypted", "consume=extend-late x queue=retention",
		"write=push x queue=dlq", "fault=pg.reset x write=push", "fault=pg.reset x consume=pop",
	}
	for _, c := range want {
		if cov[c] == 0 {
			t.Errorf("cell %q not reached; got %v", c, cellNames(cov))
		}
	}
	for _, c := range []string{"consume=queue-mode x queue=plain", "consume=extend-early x queue=plain", "fault=pg.reset x write=txn"} {
		if cov[c] != 0 {
			t.Errorf("cell %q reached, but the history never did it", c)
		}
	}
}

func cellNames(c sim.Coverage) []string {
	var out []string
	for k := range c {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// A pop driven through the broker's consumer (Direct on its invoke) adds
// consume=direct beside its own mode; an HTTP pop does not.
func TestCoverCountsDirectPops(t *testing.T) {
	m := sim.Msg{Tenant: "t1", Queue: "q", Partition: "p0", Txid: "a", Lease: "L1"}
	h := []sim.Event{
		{Kind: sim.KInvoke, Call: 1, Op: "push", VT: 10, Tenant: "t1", Queue: "q", Partition: "p0", Txid: "a"},
		{Kind: sim.KOK, Call: 1, Op: "push", VT: 11, Code: 201, Status: "queued"},
		{Kind: sim.KInvoke, Call: 2, Op: "pop", VT: 40, Tenant: "t1", Queue: "q", LeaseSecs: 5, Direct: true},
		{Kind: sim.KOK, Call: 2, Op: "pop", VT: 41, Code: 200, Msgs: []sim.Msg{m}},
	}
	if cov := sim.Cover(h); cov["consume=direct x queue=plain"] == 0 || cov["consume=queue-mode x queue=plain"] == 0 {
		t.Errorf("direct queue-mode pop: got %v", cellNames(cov))
	}
	h[2].Direct = false
	if cov := sim.Cover(h); cov["consume=direct x queue=plain"] != 0 {
		t.Errorf("HTTP pop counted as direct: got %v", cellNames(cov))
	}
}
