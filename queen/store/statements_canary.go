//go:build canary

package store

import (
	"sync"

	"github.com/queen-go/queen/queen/canary"
)

// substituted caches each statement as a canary rewrote it, keyed by
// statement name and canary name: QUEEN_CANARY is read per call (tests set
// it with t.Setenv), so one process may see several canaries.
var substituted sync.Map // [2]string{name, canary} -> string

// text is the statement named name as the switched-on canary rewrites it
// (statementVariants), or its production text when no canary of it is on.
func text(name string) string {
	sql := baseText(name)
	vs := statementVariants[name]
	for _, v := range vs {
		if !canary.On(v.canary) {
			continue
		}
		key := [2]string{name, v.canary}
		if cached, ok := substituted.Load(key); ok {
			return cached.(string)
		}
		cached, _ := substituted.LoadOrStore(key, substitute(sql, vs, v.canary))
		return cached.(string)
	}
	return sql
}
