package httpapi

import (
	"net/http"
	"net/http/httptest"
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
