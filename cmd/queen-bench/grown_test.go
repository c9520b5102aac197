package main

import "testing"

// TestGrownWorkloads checks that every workload the grown mode names is
// one of make bench's: a renamed one would silently drop its row.
func TestGrownWorkloads(t *testing.T) {
	ws := grownWorkloads()
	if len(ws) != len(grownNames) {
		t.Fatalf("grown mode found %d of the workloads %v", len(ws), grownNames)
	}
	for i, w := range ws {
		if w.name != grownNames[i] || w.brokerOp == nil || w.setup == nil {
			t.Errorf("workload %d: %q, want %q with a broker op and a setup", i, w.name, grownNames[i])
		}
	}
}

// TestGrownRatios checks grown/fresh figure by figure, and 0 where the
// fresh figure is 0 rather than an infinity in the JSON.
func TestGrownRatios(t *testing.T) {
	fresh := grownFigures{Rate: 1000, PGCPUPer1k: 0.05, BrokerCPUPer1k: 0.08, WALPerMsg: 600, StmtsPerMsg: 0.05, HitsPerMsg: 10}
	grown := grownFigures{Rate: 900, PGCPUPer1k: 0.06, BrokerCPUPer1k: 0.08, WALPerMsg: 660, StmtsPerMsg: 0.05, HitsPerMsg: 15, ReadsPerMsg: 0.1}
	r := ratios(fresh, grown)
	want := grownFigures{Rate: 0.9, PGCPUPer1k: 1.2, BrokerCPUPer1k: 1, WALPerMsg: 1.1, StmtsPerMsg: 1, HitsPerMsg: 1.5}
	for name, pair := range map[string][2]float64{"rate": {r.Rate, want.Rate}, "pg": {r.PGCPUPer1k, want.PGCPUPer1k},
		"broker": {r.BrokerCPUPer1k, want.BrokerCPUPer1k}, "wal": {r.WALPerMsg, want.WALPerMsg}, "stmts": {r.StmtsPerMsg, want.StmtsPerMsg},
		"hits": {r.HitsPerMsg, want.HitsPerMsg}, "reads": {r.ReadsPerMsg, want.ReadsPerMsg}} {
		if d := pair[0] - pair[1]; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s ratio %v, want %v", name, pair[0], pair[1])
		}
	}
}
