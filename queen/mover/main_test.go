package mover_test

import (
	"testing"

	"github.com/queen-go/queen/queen/mover"
	"github.com/queen-go/queen/queen/sqlargs"
	"github.com/queen-go/queen/queen/store/storetest"
)

// TestMain fails the binary on a leaked goroutine.
func TestMain(m *testing.M) { storetest.Main(m) }

// TestParamsMatchPlaceholders: each statement's params struct has one
// field per placeholder, and the text skips none.
func TestParamsMatchPlaceholders(t *testing.T) {
	for name, st := range mover.Statements() {
		for _, bad := range sqlargs.Check(st[0].(string), st[1]) {
			t.Errorf("statement %s: %s", name, bad)
		}
	}
}
