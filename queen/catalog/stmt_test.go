package catalog

import (
	"regexp"
	"strconv"
	"testing"
)

// TestParamsMatchPlaceholders: each statement's params struct has one
// field per placeholder, and the text skips none.
func TestParamsMatchPlaceholders(t *testing.T) {
	placeholder := regexp.MustCompile(`\$(\d+)`)
	for name, st := range statements {
		seen := map[int]bool{}
		for _, m := range placeholder.FindAllStringSubmatch(st.text, -1) {
			n, _ := strconv.Atoi(m[1])
			seen[n] = true
		}
		if fields := len(argsOf(st.params)); len(seen) != fields {
			t.Errorf("statement %s has %d placeholders, its params %T %d fields", name, len(seen), st.params, fields)
		}
		for n := 1; n <= len(seen); n++ {
			if !seen[n] {
				t.Errorf("statement %s skips $%d", name, n)
			}
		}
	}
}
