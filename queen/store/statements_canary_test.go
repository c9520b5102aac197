//go:build canary

package store

import (
	"slices"
	"testing"
)

// TestTextPlantsTheSwitchedOnCanary: in the canary build, text gives each
// statement as its switched-on canary rewrites it, whichever canary a test
// switched on before (the cache is per canary), and the production text
// when no canary of the statement is on.
func TestTextPlantsTheSwitchedOnCanary(t *testing.T) {
	canaries := []string{"", "no-such-canary"}
	for _, vs := range statementVariants {
		for _, v := range vs {
			canaries = append(canaries, v.canary)
		}
	}
	slices.Sort(canaries)
	canaries = slices.Compact(canaries)
	for _, c := range append(canaries, canaries...) { // twice: the second round reads the cache
		t.Setenv("QUEEN_CANARY", c)
		for name, st := range statements {
			want := substitute(st.text, statementVariants[name], c)
			if got := text(name); got != want {
				t.Errorf("QUEEN_CANARY=%q: statement %s is not as the canary rewrites it", c, name)
			}
			if c == "" && text(name) != st.text {
				t.Errorf("no canary: statement %s is rewritten", name)
			}
		}
	}
	t.Setenv("QUEEN_CANARY", "claim-unfair")
	if text("pop") == baseText("pop") || text("pop.one") == baseText("pop.one") || text("append") != baseText("append") {
		t.Error("claim-unfair rewrites the wrong statements")
	}
}
