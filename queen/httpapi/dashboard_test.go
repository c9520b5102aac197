package httpapi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/queen-go/queen/queen/config"
)

// /dashboard/ serves the embedded dashboard, public (its data needs a
// token); QUEEN_DASHBOARD_DIR serves another build at every other GET path
// with history-mode fallback, while API paths keep their JSON 404.
func TestDashboardRoutes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("<html>their app</html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *config.Config) { c.DashboardDir, c.JWTEnabled, c.JWT.Secret = dir, true, "test-secret" })
	if r := e.do("GET", "/dashboard/", nil); r.status != 200 || !strings.Contains(string(r.body), "app.js") {
		t.Fatalf("/dashboard/: %d %.100s", r.status, r.body)
	}
	if r := e.do("GET", "/queues/orders", nil); r.status != 200 || !strings.Contains(string(r.body), "their app") {
		t.Fatalf("history fallback: %d %.100s", r.status, r.body)
	}
	for _, p := range []string{"/api/v1/nope", "/streams/v1/nope", "/metrics/nope"} {
		if r := e.do("GET", p, nil); r.status != 404 || r.obj(t)["code"] != "no_such_route" {
			t.Errorf("%s: %d %.100s", p, r.status, r.body)
		}
	}
	if r := e.do("GET", "/api/v1/session", nil); r.status != 401 {
		t.Fatalf("session without a token: %d", r.status)
	}
	s := e.expect(e.do("GET", "/api/v1/session", nil, "Authorization", token(t, "bob", "read-only")), 200).obj(t)
	if s["level"] != "read-only" || s["canWrite"] != false || s["canAdmin"] != false || s["sub"] != "bob" {
		t.Fatalf("read-only session: %v", s)
	}
	s = e.expect(e.do("GET", "/api/v1/session", nil, "Authorization", token(t, "root", "admin")), 200).obj(t)
	if s["level"] != "admin" || s["canWrite"] != true || s["canAdmin"] != true {
		t.Fatalf("admin session: %v", s)
	}
	c := e.expect(e.do("GET", "/api/v1/system/cluster", nil, "Authorization", token(t, "bob", "read-only")), 200).obj(t)
	if c["mesh"] != nil || c["leaders"] == nil {
		t.Fatalf("cluster for a read-only token shows the mesh: %v", c)
	}
	if r := e.do("POST", "/api/v1/migration/start", map[string]any{}, "Authorization", token(t, "root", "admin")); r.status != 501 ||
		!strings.Contains(r.obj(t)["error"].(string), "pg_dump") {
		t.Fatalf("migration: %d %s", r.status, r.body)
	}
}
