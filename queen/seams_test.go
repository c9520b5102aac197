package queen_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSeamsAreRespected keeps the broker honest about its seams: outside
// queen/clock no production code reads the wall clock or sleeps on it, and
// nothing draws from math/rand; store SQL never calls now() except inside
// coalesce($n, now()) (or as a bookkeeping column DEFAULT); SQLSTATEs are compared through pgerrcode, never as
// string literals. (pglocal and storetest are tooling, not the broker.)
func TestSeamsAreRespected(t *testing.T) {
	wallClock := regexp.MustCompile(`time\.(Now|Sleep|After|NewTimer|NewTicker|Tick)\(|"math/rand`)
	bareNow := regexp.MustCompile(`(^|[^.\w])now\(\)`) // SQL now(), not a Go method named Now or dbNow
	sqlstate := regexp.MustCompile(`Code == "[0-9A-Z]{5}"`)
	err := filepath.Walk(".", func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		if strings.HasPrefix(path, "clock/") || strings.HasPrefix(path, "pglocal/") || strings.HasPrefix(path, "store/storetest/") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			if wallClock.MatchString(line) {
				t.Errorf("%s:%d: reads wall time or math/rand outside queen/clock: %s", path, i+1, strings.TrimSpace(line))
			}
			if strings.HasPrefix(path, "store/") && bareNow.MatchString(line) && !strings.Contains(line, "coalesce(") && !strings.Contains(line, "DEFAULT now()") {
				t.Errorf("%s:%d: now() outside coalesce($now, now()): database time must be injectable", path, i+1)
			}
			if sqlstate.MatchString(line) {
				t.Errorf("%s:%d: compare SQLSTATEs through pgerrcode", path, i+1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSeamsKeepImportArrowsOneWay pins who may import whom among the statement
// and policy packages: queen/store holds statements only and imports none of
// the packages that decide policy over them; queen/combine knows no
// statements and imports nothing of queen but canary and admission; the
// policy packages (pushpath, consume) run the combiners over store; queen/txn
// (the transaction route) and queen/streams (the streams cycle) compose
// store's statements and are reached from httpapi; they import nothing else
// of queen but canary, queen/names (names to ids, cached, and the stale
// retry) and queen/writes (the write policy), except that txn acks through
// consume, which owns the ack state machine. queen/names runs store's
// statements and imports no policy; queen/writes (what a write does to rows
// before and around the append: sealing, the needs-seal re-run, the
// in-batch dedup) runs store's statements over the seams below it only.
func TestSeamsKeepImportArrowsOneWay(t *testing.T) {
	const mod = "github.com/queen-go/queen/queen/"
	rules := map[string]func(imp string) bool{
		"store": func(imp string) bool {
			return !strings.HasPrefix(imp, mod+"pushpath") && !strings.HasPrefix(imp, mod+"consume") &&
				!strings.HasPrefix(imp, mod+"httpapi") && !strings.HasPrefix(imp, mod+"txn") &&
				!strings.HasPrefix(imp, mod+"streams") && !strings.HasPrefix(imp, mod+"names") &&
				!strings.HasPrefix(imp, mod+"writes")
		},
		"names": func(imp string) bool {
			return !strings.HasPrefix(imp, mod) || imp == mod+"store" || imp == mod+"canary" || imp == mod+"clock" ||
				imp == mod+"ttlcache"
		},
		"writes": func(imp string) bool {
			return !strings.HasPrefix(imp, mod) || imp == mod+"store" || imp == mod+"crypt" || imp == mod+"canary" ||
				imp == mod+"clock" || imp == mod+"ttlcache"
		},
		"txn": func(imp string) bool {
			return !strings.HasPrefix(imp, mod) || imp == mod+"store" || imp == mod+"canary" || imp == mod+"consume" ||
				imp == mod+"names" || imp == mod+"writes"
		},
		"streams": func(imp string) bool {
			return !strings.HasPrefix(imp, mod) || imp == mod+"store" || imp == mod+"canary" || imp == mod+"names" ||
				imp == mod+"writes"
		},
		"combine": func(imp string) bool {
			return !strings.HasPrefix(imp, mod) || imp == mod+"canary" || imp == mod+"admission"
		},
	}
	rules["pushpath"] = func(string) bool { return true }
	rules["consume"] = func(string) bool { return true }
	rules["httpapi"] = func(string) bool { return true }
	imported := map[string]bool{}
	for dir, allowed := range rules {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range parsed.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				if !allowed(path) {
					t.Errorf("%s imports %s", f, path)
				}
				imported[dir+" "+path] = true
			}
		}
	}
	// The combiners are the policy packages': they run them over store. The
	// transaction's and the streams cycle's policies are txn's and streams',
	// over store, and httpapi calls them; a transaction's acks are
	// consume's.
	for _, arrow := range []string{"pushpath " + mod + "combine", "pushpath " + mod + "store",
		"consume " + mod + "combine", "consume " + mod + "store",
		"txn " + mod + "store", "txn " + mod + "consume", "httpapi " + mod + "txn", "streams " + mod + "store", "httpapi " + mod + "streams",
		"pushpath " + mod + "names", "consume " + mod + "names", "txn " + mod + "names", "streams " + mod + "names",
		"writes " + mod + "store", "pushpath " + mod + "writes", "txn " + mod + "writes", "streams " + mod + "writes",
		"httpapi " + mod + "writes"} {
		if !imported[arrow] {
			t.Errorf("%s no longer imports %s", strings.Fields(arrow)[0], strings.Fields(arrow)[1])
		}
	}
}

// layers places every package of the broker on a layer: a package imports
// only packages of lower layers, so the import graph reads top-down from the
// route table to the statements, with no upward arrow. A new package must be
// given a layer here; placing it is the decision of where its concern sits.
var layers = map[string]int{
	// Leaves: seams and switches that know no other queen package.
	"admission": 0, "canary": 0, "clock": 0, "connlimit": 0, "crypt": 0, "dashboard": 0, "pglocal": 0, "waker": 0,
	// A params struct as its statement's arguments, for both kinds of statements.
	"sqlargs": 0,
	// Mechanisms over the seams.
	"auth": 1, "background": 1, "combine": 1, "dbprobe": 1, "ids": 1, "mesh": 1, "ttlcache": 1,
	// Shard configuration, placement and the copy's statements, read by
	// config and (later) the router.
	"shards": 1,
	// A broker's own records of its database and of the passes it led.
	"outages": 1, "passes": 1,
	"limits": 2,
	"config": 3,
	// The statements: a shard's, and the catalogue's (placements, moves,
	// the placement cache), which the router will read beside them.
	"catalog": 4, "store": 4,
	// Names to ids, cached, and the one retry when a cached id went stale;
	// what a write does to rows before and around the append (sealing, the
	// in-batch dedup), which names forgets the hints of through an
	// interface of its own.
	"names": 5, "writes": 5,
	// Services and policy over the statements.
	"analytics": 6, "consume": 6, "leader": 6, "spool": 6, "store/storetest": 6, "sweeper": 6,
	"streams": 6,
	// The online move of a queue between shards: a state machine over the
	// catalogue's and the shards' statements.
	"mover": 6,
	// The transaction route acks through consume.
	"maintenance": 7, "pushpath": 7, "txn": 7,
	// The wire, and the paths wired as a broker wires them, for tests.
	"httpapi": 8, "pathtest": 8,
}

// TestPackagesImportOnlyLowerLayers fails on an import that points up or
// sideways in layers, and on a package under queen/ that has no layer.
func TestPackagesImportOnlyLowerLayers(t *testing.T) {
	const mod = "github.com/queen-go/queen/queen/"
	err := filepath.Walk(".", func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if dir == "." {
			return nil // package queen wires every layer together
		}
		own, ok := layers[dir]
		if !ok {
			t.Errorf("%s: package %s has no layer in seams_test.go's layers", path, dir)
			return nil
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range parsed.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if !strings.HasPrefix(p, mod) {
				continue
			}
			if l, ok := layers[strings.TrimPrefix(p, mod)]; !ok || l >= own {
				t.Errorf("%s (layer %d) imports %s (layer %d, known %v): arrows point down only", path, own, p, l, ok)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
