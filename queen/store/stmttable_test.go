package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/sqlargs"
)

// TestParamsMatchPlaceholders: a statement's params struct is its argument
// list, so its fields (in order, $1 the first) are exactly as many as the
// distinct $n placeholders of its text, which run from $1 without a gap.
func TestParamsMatchPlaceholders(t *testing.T) {
	for name, st := range statements {
		if st.params == nil {
			continue
		}
		for _, bad := range sqlargs.Check(st.text, st.params) {
			t.Errorf("statement %s: %s", name, bad)
		}
	}
}

// TestStatementNamesAreRegistered: every text("name") call of the package
// names a statement of the table, so no call can reach baseText's panic.
func TestStatementNamesAreRegistered(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	calls := 0
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if id, isIdent := callee(call, ok); !isIdent || id != "text" || len(call.Args) != 1 {
				return true
			}
			calls++
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok {
				return true // built names (retention.<rule>) are checked below
			}
			name, _ := strconv.Unquote(lit.Value)
			if _, ok := statements[name]; !ok {
				t.Errorf("%s: text(%q) names no statement", fset.Position(call.Pos()), name)
			}
			return true
		})
	}
	if calls == 0 {
		t.Fatal("found no text calls: the test reads the wrong files")
	}
	for _, r := range retentionRules {
		if _, ok := statements["retention."+r.name]; !ok {
			t.Errorf("retention rule %s has no statement", r.name)
		}
	}
}

// callee is the name a plain call calls.
func callee(call *ast.CallExpr, ok bool) (string, bool) {
	if !ok {
		return "", false
	}
	id, ok := call.Fun.(*ast.Ident)
	if !ok {
		return "", false
	}
	return id.Name, true
}

// TestArgsOfKeepsDeclarationOrder: the arguments are the fields in order,
// an embedded struct's in its place.
func TestArgsOfKeepsDeclarationOrder(t *testing.T) {
	now := time.Unix(1, 0)
	p := popPartitionParams{popParams{QueueID: "q", Group: "g", Partitions: 1, Batch: 2, LeaseID: "l", LeaseSeconds: 3,
		AutoAck: true, Now: &now, MaxBytes: 4}, "p"}
	want := []any{"q", "g", 1, 2, "l", 3, true, &now, int64(4), (*int64)(nil), "p"}
	if got := argsOf(p); !reflect.DeepEqual(got, want) {
		t.Fatalf("argsOf = %v, want %v", got, want)
	}
}

// BenchmarkArgsOf measures argsOf on the push path's params (appendParams),
// against the positional list it replaced.
func BenchmarkArgsOf(b *testing.B) {
	now := time.Now()
	wait := "1s"
	ids := make([]string, 10)
	p := appendParams{IDs: ids, PartitionIDs: ids, TransactionIDs: ids, TraceIDs: ids, Payloads: ids, ProducerSubs: ids,
		Now: &now, Encrypted: make([]bool, 10), LockWait: &wait, SealCheck: true}
	b.Run("argsOf", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sink = argsOf(p)
		}
	})
	b.Run("positional", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sink = []any{p.IDs, p.PartitionIDs, p.TransactionIDs, p.TraceIDs, p.Payloads, p.ProducerSubs, p.Now, p.Encrypted,
				p.LockWait, p.SealCheck}
		}
	})
}

// sink keeps the benchmark's results alive.
var sink []any
