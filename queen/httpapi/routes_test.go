package httpapi

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/queen-go/queen/queen/auth"
)

// Every route declares its access level in the route table; a route added
// without one fails here (and is refused by the middleware), instead of
// taking whatever level its path prefix implied.
func TestEveryRouteDeclaresItsLevel(t *testing.T) {
	s := &Server{}
	seen := map[string]bool{}
	for _, rt := range s.routes() {
		if rt.level == auth.Unset {
			t.Errorf("%s declares no access level", rt.pattern)
		}
		if seen[rt.pattern] {
			t.Errorf("%s is in the route table twice", rt.pattern)
		}
		seen[rt.pattern] = true
		// Public: the health check, and the dashboard's static files (no
		// data: every datum they show comes from the API with a token).
		if public := map[string]bool{"GET /health": true, "GET /dashboard": true, "GET /dashboard/": true, "GET /favicon.ico": true}; rt.level == auth.Public && !public[rt.pattern] {
			t.Errorf("%s is public: only /health and the dashboard's files may be", rt.pattern)
		}
		if strings.HasPrefix(rt.pattern, "DELETE /api/v1/resources/queues/") && rt.level != auth.Admin {
			t.Errorf("%s deletes a queue below admin", rt.pattern)
		}
	}
	if len(seen) < 60 {
		t.Fatalf("only %d routes: the table lost some", len(seen))
	}
}

// A route without a level is refused, never served as public.
func TestRouteWithoutLevelIsRefused(t *testing.T) {
	s := &Server{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /undeclared", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	rec := httptest.NewRecorder()
	s.middleware(mux, map[string]auth.Level{}).ServeHTTP(rec, httptest.NewRequest("GET", "/undeclared", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("a route with no level answered %d", rec.Code)
	}
}

// TestHeadOnlyWhereGetHasNoEffect walks the route table: HEAD reaches only
// the GET routes declared safe for it (health and the dashboard's static
// files), never a pop or any other API route; every other GET answers HEAD
// with 405 (TestHeadDoesNotPop).
func TestHeadOnlyWhereGetHasNoEffect(t *testing.T) {
	s := &Server{}
	table := map[string]route{}
	for _, rt := range s.routes() {
		table[rt.pattern] = rt
	}
	for pattern := range headSafe {
		if pattern == "GET /" {
			continue // the external dashboard's catch-all (QUEEN_DASHBOARD_DIR): static files
		}
		rt, ok := table[pattern]
		if !ok || !strings.HasPrefix(pattern, "GET ") || rt.level != auth.Public {
			t.Errorf("HEAD is declared safe for %s, which is not a public GET of the table", pattern)
		}
	}
	for pattern := range table {
		if strings.Contains(pattern, "/pop") && headSafe[pattern] {
			t.Errorf("HEAD may reach the pop route %s", pattern)
		}
	}
}

// TestBatchOpsDeclareTheirLevels: every op of a batch route has a level
// in the table, none looser than the route's own (the middleware's
// floor), and the timers' cancel and reschedule need what DELETE of a
// timer needs.
func TestBatchOpsDeclareTheirLevels(t *testing.T) {
	s := &Server{}
	table := map[string]route{}
	for _, rt := range s.routes() {
		table[rt.pattern] = rt
	}
	a, err := auth.New(auth.Config{Algorithm: "HS256", Secret: "x", RoleAdmin: "admin", RoleReadWrite: "rw", RoleReadOnly: "ro", RoleWriteOnly: "wo"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	passes := func(l auth.Level, role string) bool { return a.Allows(auth.Principal{Roles: []string{role}}, l) }
	for pattern, ops := range batchOps {
		rt, ok := table[pattern]
		if !ok {
			t.Errorf("batch ops declared for %s, which is not in the route table", pattern)
			continue
		}
		for op, l := range ops {
			for _, role := range []string{"admin", "rw", "ro", "wo"} {
				if l == auth.Unset || (passes(l, role) && !passes(rt.level, role)) {
					t.Errorf("%s op %s: level %d is looser than the route's %d", pattern, op, l, rt.level)
				}
			}
		}
	}
	want := map[string][]string{"POST /api/v1/timers": {"cancel", "reschedule", "schedule"},
		"POST /api/v1/transaction": {"ack", "push"}, "POST /api/v1/kv": slices.Sorted(maps.Keys(kvOps))}
	for pattern, names := range want {
		if got := slices.Sorted(maps.Keys(batchOps[pattern])); !slices.Equal(got, names) {
			t.Errorf("%s declares ops %v, its handler takes %v", pattern, got, names)
		}
	}
	del := table["DELETE /api/v1/timers/{queue}/{timerKey...}"].level
	if ops := batchOps["POST /api/v1/timers"]; ops["cancel"] != del || ops["reschedule"] != del || ops["schedule"] != auth.Produce {
		t.Errorf("timer ops %v: cancel and reschedule must need DELETE's level %d, schedule produce", ops, del)
	}
}
