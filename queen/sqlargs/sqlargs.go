// Package sqlargs turns a statement's params struct into its argument
// list: its fields in declaration order, the first one $1 (an embedded
// struct's fields in its place). A params struct is the argument list;
// nothing unpacks one by hand, so a field added or moved moves its
// placeholder with it. Check holds a params struct to its statement's
// placeholders, for the tests of each package of statements.
package sqlargs

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"sync"
)

// fields caches, per params struct type, the index paths of its fields.
var fields sync.Map // reflect.Type -> [][]int

// Of is params p as its statement's arguments.
func Of(p any) []any {
	v := reflect.ValueOf(p)
	paths := fieldPaths(v.Type())
	args := make([]any, len(paths))
	for i, path := range paths {
		args[i] = v.FieldByIndex(path).Interface()
	}
	return args
}

// fieldPaths returns t's argument fields, computed once per type.
func fieldPaths(t reflect.Type) [][]int {
	if paths, ok := fields.Load(t); ok {
		return paths.([][]int)
	}
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("sqlargs: params %s is not a struct", t))
	}
	var paths [][]int
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for _, sub := range fieldPaths(f.Type) {
				paths = append(paths, append([]int{i}, sub...))
			}
			continue
		}
		paths = append(paths, []int{i})
	}
	fields.Store(t, paths)
	return paths
}

var placeholder = regexp.MustCompile(`\$(\d+)`)

// Check reports how text's placeholders disagree with params: as many
// fields as distinct $n, which run from $1 without a gap. Nil: they agree.
func Check(text string, params any) []string {
	seen := map[int]bool{}
	for _, m := range placeholder.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		seen[n] = true
	}
	var bad []string
	if n := len(Of(params)); len(seen) != n {
		bad = append(bad, fmt.Sprintf("%d placeholders, its params %T %d fields", len(seen), params, n))
	}
	for n := 1; n <= len(seen); n++ {
		if !seen[n] {
			bad = append(bad, fmt.Sprintf("skips $%d", n))
		}
	}
	return bad
}
