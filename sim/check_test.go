package sim_test

import (
	"path/filepath"
	"testing"

	"github.com/queen-go/queen/sim"
)

var spec = sim.Spec{Groups: map[string][]string{"q": {sim.QueueMode}}, RecoverySlackMS: 1000}

func load(t *testing.T, name string) []sim.Event {
	t.Helper()
	h, err := sim.ReadHistory(filepath.Join("..", "testdata", "histories", name))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Every checker accepts the good history and rejects the bad history made
// for it: a checker that cannot fail proves nothing.
func TestCheckersRejectTheirBadHistory(t *testing.T) {
	good := load(t, "good.jsonl")
	for _, c := range sim.Checkers {
		t.Run(c.Name, func(t *testing.T) {
			if v := c.Check(good, spec); len(v) > 0 {
				t.Fatalf("rejects the good history: %v", v)
			}
			bad := load(t, c.Name+"-bad.jsonl")
			v := c.Check(bad, spec)
			if len(v) == 0 {
				t.Fatalf("accepts %s-bad.jsonl", c.Name)
			}
			t.Logf("rejects as expected: %v", v[0])
		})
	}
}
