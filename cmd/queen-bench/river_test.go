package main

import (
	"strings"
	"testing"
)

func TestThousands(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 999.4: "999", 1000: "1,000", 52629.4: "52,629", 1234567: "1,234,567", -4321: "-4,321"} {
		if got := thousands(x); got != want {
			t.Errorf("thousands(%v) = %q, want %q", x, got, want)
		}
	}
}

// TestThreeWayRow checks a row with a second River column (COPY) in
// parentheses, and that workloads without River are left out.
func TestThreeWayRow(t *testing.T) {
	cs := []comparison{
		{Name: "push-b10", RawMedian: 1, BrokerMedian: 1},
		{Name: "push-b100", Row: "100 per request", RawMedian: 84922, BrokerMedian: 29070,
			RawPGCPUPer1k: 0.019, PGCPUPer1k: 0.024, BrokerCPUPer1k: 0.013, RawWALPerMsg: 783, WALPerMsg: 600,
			Peers: []peerResult{
				{Name: "river", Median: 52629, PGCPUPer1k: 0.020, CPUPer1k: 0.008, WALPerMsg: 763},
				{Name: "river-copy", Median: 64880, PGCPUPer1k: 0.018, CPUPer1k: 0.006, WALPerMsg: 700},
			}},
	}
	lines := threeWay(cs)
	if len(lines) != 3 {
		t.Fatalf("want the header, the rule and one row, got %q", lines)
	}
	want := "| 100 per request | 84,922 | 29,070 | 52,629 (COPY 64,880) | 0.55 (COPY 0.45) | 0.019 · 0.024+0.013 · 0.020+0.008 (COPY 0.018+0.006) | 783 · 600 · 763 (COPY 700) |"
	if lines[2] != want {
		t.Errorf("row\n got %s\nwant %s", lines[2], want)
	}
}

// TestRiverProblems checks each way river_job can disagree with what the
// peers reported.
func TestRiverProblems(t *testing.T) {
	books := func() *riverBooks {
		b := newRiverBooks()
		b.add("push-b1", peerReport{Inserted: 100})
		b.add("consume", peerReport{Inserted: 50, Completed: 20})
		return b
	}
	good := map[string]riverStored{
		"push-b1": {ByState: map[string]int64{"available": 100}},
		"consume": {ByState: map[string]int64{"available": 30, "completed": 20}},
	}
	if p := books().problems(good); len(p) != 0 {
		t.Fatalf("consistent books: %q", p)
	}
	cases := map[string]struct {
		stored map[string]riverStored
		dup    int64
		want   string
	}{
		"lost insert": {map[string]riverStored{"push-b1": {ByState: map[string]int64{"available": 99}}, "consume": good["consume"]}, 0, "100 inserted, 99 stored"},
		"uncounted completion": {map[string]riverStored{"push-b1": good["push-b1"],
			"consume": {ByState: map[string]int64{"available": 29, "completed": 21}}}, 0, "20 completions reported, 21 stored"},
		"retryable": {map[string]riverStored{"push-b1": good["push-b1"],
			"consume": {ByState: map[string]int64{"available": 29, "completed": 20, "retryable": 1}}}, 0, "neither available nor completed"},
		"second attempt": {map[string]riverStored{"push-b1": good["push-b1"],
			"consume": {ByState: good["consume"].ByState, Retried: 1}}, 0, "1 jobs attempted more than once"},
		"worked twice": {good, 1, "1 worked twice"},
	}
	for name, c := range cases {
		b := books()
		b.add("consume", peerReport{Duplicates: c.dup})
		p := b.problems(c.stored)
		if len(p) == 0 || !strings.Contains(strings.Join(p, "; "), c.want) {
			t.Errorf("%s: problems %q, want one with %q", name, p, c.want)
		}
	}
}
