package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestLongestGap: the consumers' longest stall counts the gaps at both
// edges of the move and ignores events outside it.
func TestLongestGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name   string
		ts     []time.Time
		from   time.Time
		to     time.Time
		wantMS int
	}{
		{"none within", []time.Time{at(-5), at(50)}, at(0), at(40), 40},
		{"between events, unsorted", []time.Time{at(30), at(5), at(10), at(38)}, at(0), at(40), 20},
		{"from the start", []time.Time{at(25), at(30)}, at(0), at(40), 25},
		{"to the end", []time.Time{at(1), at(2)}, at(0), at(40), 38},
		{"outside ignored", []time.Time{at(-100), at(10), at(20), at(30), at(500)}, at(0), at(40), 10},
	}
	for _, c := range cases {
		if got := longestGap(c.ts, c.from, c.to); got != time.Duration(c.wantMS)*time.Millisecond {
			t.Errorf("%s: %v, want %d ms", c.name, got, c.wantMS)
		}
	}
}

// TestParseShardURLs: -shards-urls takes s0 and s1, in that order, as
// postgres URLs, and names the part it refuses.
func TestParseShardURLs(t *testing.T) {
	got, err := parseShardURLs("s0=postgres://a/x; s1=postgresql://b/y")
	if err != nil || got != [2]string{"postgres://a/x", "postgresql://b/y"} {
		t.Fatalf("%v %v", got, err)
	}
	for v, says := range map[string]string{
		"s0=postgres://a/x":                      "got 1 parts",
		"s1=postgres://a/x;s0=postgres://b/y":    "part 1",
		"s0=postgres://a/x;s1=mysql://b/y":       "part 2",
		"s0=postgres://a/x;s1=postgres://b;s2=c": "got 3 parts",
		"s0=postgres://a/x;s1":                   "part 2",
	} {
		if _, err := parseShardURLs(v); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want an error saying %q", v, err, says)
		}
	}
}

// TestSplitHalvesTheWorkers: the two-shard side sends even workers to the
// first queue and odd ones to the second.
func TestSplitHalvesTheWorkers(t *testing.T) {
	var a, b []int
	op := split(func(_ context.Context, w, _ int) (int, error) { a = append(a, w); return 1, nil },
		func(_ context.Context, w, _ int) (int, error) { b = append(b, w); return 1, nil })
	for w := range 4 {
		if _, err := op(context.Background(), w, 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(a) != 2 || len(b) != 2 || a[0] != 0 || a[1] != 2 || b[0] != 1 || b[1] != 3 {
		t.Errorf("first %v, second %v", a, b)
	}
	if ratio(1, 0) != 0 || ratio(3, 2) != 1.5 {
		t.Errorf("ratio")
	}
}

// TestShardWorkloadsRunOnlyWhenNamed: make bench's default set (no -only)
// leaves the shard workloads out; -only runs them.
func TestShardWorkloadsRunOnlyWhenNamed(t *testing.T) {
	if (options{}).named("shards") || !(options{}).selected("push-b1") {
		t.Error("the default set runs the shard workloads, or not the others")
	}
	o := options{only: "shards,shard-move"}
	if !o.named("shards") || !o.named("shard-move") || o.named("push-b1") || o.named("shard") {
		t.Errorf("-only %s: named wrongly", o.only)
	}
}
