package catalog

import (
	"testing"

	"github.com/queen-go/queen/queen/sqlargs"
)

// TestParamsMatchPlaceholders: each statement's params struct has one
// field per placeholder, and the text skips none.
func TestParamsMatchPlaceholders(t *testing.T) {
	for name, st := range statements {
		for _, bad := range sqlargs.Check(st.text, st.params) {
			t.Errorf("statement %s: %s", name, bad)
		}
	}
}
