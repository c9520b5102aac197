//go:build attack

package attack

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strconv"
	"strings"
)

// routeEntry is one row of the broker's route table: "METHOD /path" and
// the access level it declares (auth.<Level>).
type routeEntry struct {
	method, path, level string
}

// routeTable reads the route table from queen/httpapi/server.go's source:
// every composite literal whose first element is a "METHOD /path" string
// and whose second is auth.<Level>. Reading the source keeps the suite
// black-box to the broker (no test-only export in production code) while
// following every route added to the table.
func routeTable() ([]routeEntry, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../queen/httpapi/server.go", nil, 0)
	if err != nil {
		return nil, fmt.Errorf("parse the route table: %w", err)
	}
	pat := regexp.MustCompile(`^(GET|POST|PUT|DELETE|PATCH) (/\S*)$`)
	var out []routeEntry
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok || len(lit.Elts) < 2 {
			return true
		}
		s, ok := lit.Elts[0].(*ast.BasicLit)
		if !ok || s.Kind != token.STRING {
			return true
		}
		v, _ := strconv.Unquote(s.Value)
		m := pat.FindStringSubmatch(v)
		sel, ok := lit.Elts[1].(*ast.SelectorExpr)
		if m == nil || !ok || m[2] == "/" {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == "auth" {
			out = append(out, routeEntry{method: m[1], path: m[2], level: sel.Sel.Name})
		}
		return true
	})
	if len(out) < 20 {
		return nil, fmt.Errorf("read only %d routes from queen/httpapi/server.go: has the table's shape changed?", len(out))
	}
	return out, nil
}

// fill substitutes every {param} of a route path from vals (missing ones
// become "x").
func fillPath(path string, vals map[string]string) string {
	re := regexp.MustCompile(`\{([a-zA-Z]+)(\.\.\.)?\}`)
	return re.ReplaceAllStringFunc(path, func(m string) string {
		name := strings.Trim(strings.TrimSuffix(strings.Trim(m, "{}"), "..."), "{}")
		if v, ok := vals[name]; ok {
			return v
		}
		return "x"
	})
}
