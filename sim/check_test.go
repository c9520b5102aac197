package sim_test

import (
	"path/filepath"
	"testing"

	"github.com/queen-go/queen/sim"
)

var spec = sim.Spec{Groups: map[string][]string{"q": {sim.QueueMode}}, Partitions: map[string]int{"q": 2}, RecoverySlackMS: 1000,
	DelayMS: map[string]int64{"delayed": 2000}, WindowMS: map[string]int64{"windowed": 1000}} // queue options only on queues of their own

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
			files, _ := filepath.Glob(filepath.Join("..", "testdata", "histories", c.Name+"-bad*.jsonl"))
			if len(files) == 0 {
				t.Fatalf("no bad history for %s", c.Name)
			}
			for _, f := range files {
				v := c.Check(load(t, filepath.Base(f)), spec)
				if len(v) == 0 {
					t.Fatalf("accepts %s", filepath.Base(f))
				}
				t.Logf("%s rejected as expected: %v", filepath.Base(f), v[0])
			}
		})
	}
}

// Histories the checkers once rejected wrongly stay accepted.
func TestCheckersAcceptRegressionHistories(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "histories", "accepted-*.jsonl"))
	if len(files) == 0 {
		t.Fatal("no accepted-*.jsonl histories")
	}
	s := sim.Spec{Groups: map[string][]string{"hot": {sim.QueueMode, "audit"}}, Partitions: map[string]int{"hot": 2}, RecoverySlackMS: 2000}
	for _, f := range files {
		h := load(t, filepath.Base(f))
		for _, c := range sim.Checkers {
			if v := c.Check(h, s); len(v) > 0 {
				t.Errorf("%s: %s rejects it: %v", filepath.Base(f), c.Name, v[0])
			}
		}
	}
}

// A queue with completed retention or eviction may legitimately store a
// transactionId twice or lose a message unconsumed, within bounds; the
// checkers accept what the bounds allow and reject what they do not.
func TestCheckersKnowRetentionAndEviction(t *testing.T) {
	base := sim.Spec{Groups: map[string][]string{"q": {sim.QueueMode}}, Partitions: map[string]int{"q": 1}, RecoverySlackMS: 1000}
	retention, eviction := base, base
	retention.RetentionMS = map[string]int64{"q": 5000}
	eviction.MaxWaitMS = map[string]int64{"q": 10000}
	for _, tc := range []struct {
		file string
		spec sim.Spec
		bad  string // the checker that must reject it; "" for none
	}{
		{"retention-reinsert-accepted.jsonl", retention, ""},
		{"retention-reinsert-accepted.jsonl", base, "dedup"}, // no retention: stored twice
		{"retention-reinsert-early-bad.jsonl", retention, "dedup"},
		{"eviction-accepted.jsonl", eviction, ""},
		{"eviction-accepted.jsonl", base, "no-loss"}, // no eviction: "a" is lost
		{"eviction-skipped-bad.jsonl", eviction, "no-loss"},
	} {
		judgeCase(t, tc.file, tc.spec, tc.bad, false)
	}
}

// The retention-progress rule excuses only the rule the fault made fail:
// the same observations with another rule failing are a violation.
func TestRetentionProgressExcusesOnlyTheFailingRule(t *testing.T) {
	h := load(t, "accepted-retention-rule-failing.jsonl")
	if v := sim.CheckRetention(h, spec); len(v) > 0 {
		t.Fatalf("rejects the completed rule's message kept while that rule fails: %v", v)
	}
	for i := range h {
		if h[i].Kind == sim.KFault && h[i].Fault == "retention.fail" {
			h[i].Rule = "expired"
		}
	}
	v := sim.CheckRetention(h, spec)
	if len(v) == 0 {
		t.Fatal("accepts the completed rule's message kept while another rule fails")
	}
	t.Logf("rejected as expected: %v", v[0])
}

// delayedProcessing and windowBuffer hide messages for a while: the
// checkers that expect a pop to find something allow for it, and the
// queue-options rule rejects a delivery they forbid.
func TestCheckersKnowQueueOptions(t *testing.T) {
	base := sim.Spec{Groups: map[string][]string{"delayed": {sim.QueueMode}, "windowed": {sim.QueueMode}},
		Partitions: map[string]int{"delayed": 1, "windowed": 2}, RecoverySlackMS: 1000}
	opts := base
	opts.DelayMS = map[string]int64{"delayed": 2000}
	opts.WindowMS = map[string]int64{"windowed": 1000}
	for _, tc := range []struct {
		file string
		spec sim.Spec
		bad  string // the checker that must reject it; "" for none
	}{
		{"queue-options-accepted.jsonl", opts, ""},
		{"queue-options-accepted.jsonl", base, "liveness"}, // no options: the empty pops are stalls
		{"queue-options-bad-delay.jsonl", opts, "queue-options"},
		{"queue-options-bad-delay.jsonl", base, ""},
		{"queue-options-bad-window.jsonl", opts, "queue-options"},
		{"queue-options-bad-window.jsonl", base, ""},
	} {
		judgeCase(t, tc.file, tc.spec, tc.bad, true)
	}
}

// judgeCase runs every checker on the history in file under spec: the
// checker named bad must reject it; with bad "" none may, and with alone
// no other checker may either.
func judgeCase(t *testing.T, file string, spec sim.Spec, bad string, alone bool) {
	t.Helper()
	h := load(t, file)
	for _, c := range sim.Checkers {
		v := c.Judge(h, spec)
		switch {
		case c.Name == bad && len(v) == 0:
			t.Errorf("%s: %s accepts it", file, c.Name)
		case c.Name != bad && len(v) > 0 && (bad == "" || alone):
			t.Errorf("%s: %s rejects it: %v", file, c.Name, v[0])
		case c.Name == bad:
			t.Logf("%s rejected as expected: %v", file, v[0])
		}
	}
}
