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
