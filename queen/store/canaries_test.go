package store

import (
	"strings"
	"testing"
)

// TestCanaryVariantsApply: every planted bug that rewrites a statement still
// finds the text it rewrites in the statement its table entry names, so a
// change to a statement cannot disarm its canary silently (the canaries run
// only under -tags canary; this runs in make test). The stranded canary's
// rewrite is a function that panics when it no longer matches.
func TestCanaryVariantsApply(t *testing.T) {
	for name, vs := range statementVariants {
		st, ok := statements[name]
		if !ok {
			t.Errorf("canary table names statement %q, which the statement table does not hold", name)
			continue
		}
		for _, v := range vs {
			if v.rewrite == nil && !strings.Contains(st.text, v.old) {
				t.Errorf("canary %s no longer rewrites statement %s: %q not found", v.canary, name, v.old)
			}
			if v.apply(st.text) == st.text || substitute(st.text, vs, v.canary) == st.text {
				t.Errorf("canary %s leaves statement %s as it is", v.canary, name)
			}
		}
	}
}

// canaryStatements are the statements each canary that is a statement
// variant must rewrite. A canary taken out of a Go branch into the table
// (ack-ignores-lease was a parameter, lock-stalls-all a lock wait value)
// fails here if its entry is dropped or misses a statement it used to
// reach, instead of quietly planting less of its bug.
var canaryStatements = map[string][]string{
	"ack-ignores-lease": {"ack.completed", "ack.read"},
	"lock-stalls-all":   {"append", "ack.completed"},
}

// TestCanaryVariantsCoverTheirStatements: every statement a canary must
// rewrite is rewritten by it, by all of its rewrites for that statement.
func TestCanaryVariantsCoverTheirStatements(t *testing.T) {
	for c, names := range canaryStatements {
		for _, name := range names {
			var n int
			for _, v := range statementVariants[name] {
				if v.canary == c {
					n++
					if !strings.Contains(statements[name].text, v.old) {
						t.Errorf("canary %s: %q not found in statement %s", c, v.old, name)
					}
				}
			}
			if n == 0 {
				t.Errorf("canary %s does not rewrite statement %s", c, name)
			}
		}
	}
}

// TestFreezeOnlyLocksApplies: the freeze-only-locks canary, applied by
// fence rather than the statement table, still finds what it rewrites in
// fenceSQL.
func TestFreezeOnlyLocksApplies(t *testing.T) {
	for _, v := range freezeOnlyLocks {
		if !strings.Contains(fenceSQL, v.old) {
			t.Errorf("canary %s no longer rewrites fenceSQL: %q not found", v.canary, v.old)
		}
	}
	if substitute(fenceSQL, freezeOnlyLocks, "freeze-only-locks") == fenceSQL {
		t.Error("freeze-only-locks leaves fenceSQL as it is")
	}
}
