package store

import (
	"strings"
	"testing"
)

// TestCanaryVariantsApply: every planted bug that rewrites a statement still
// finds the text it rewrites, so a change to a statement cannot disarm its
// canary silently (the canaries run only under -tags canary; this runs in
// make test). The stranded canary's rewrite of appendSQL is a function that
// panics when it no longer matches.
func TestCanaryVariantsApply(t *testing.T) {
	for _, c := range canaryVariants() {
		if c.stmt == "" || !strings.Contains(c.stmt, c.v.old) || c.v.apply(c.stmt) == c.stmt {
			t.Errorf("canary %s no longer rewrites its statement: %q not found", c.v.canary, c.v.old)
		}
	}
	if strandedSQL(appendSQL) == appendSQL {
		t.Error("canary stranded no longer rewrites appendSQL")
	}
}
