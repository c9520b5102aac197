package dashboard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/queen-go/queen/queen/dashboard"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

// Another dashboard's build is served with history-mode fallback: a file
// when the path names one, index.html otherwise, nothing outside its
// folder.
func TestDirServesABuildWithHistoryFallback(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "assets"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"index.html": "<html>app</html>", "assets/app.js": "console.log(1)"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := dashboard.Dir(dir)
	for path, want := range map[string]string{"/": "app", "/queues/orders": "app", "/assets/app.js": "console.log", "/assets": "app",
		"/../../etc/passwd": "app"} {
		if code, body := get(t, h, path); code != 200 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %q, want %q", path, code, body, want)
		}
	}
}

// The embedded dashboard serves its page at the prefix and its files
// under it.
func TestEmbeddedDashboard(t *testing.T) {
	h := http.StripPrefix("", dashboard.Handler("/dashboard/"))
	for path, want := range map[string]string{"/dashboard/": "<script src=\"app.js\">", "/dashboard/app.js": "REFRESH_MS", "/dashboard/style.css": "--accent"} {
		if code, body := get(t, h, path); code != 200 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %.80q", path, code, body)
		}
	}
	if code, _ := get(t, h, "/dashboard/missing.js"); code != 404 {
		t.Errorf("a missing file: %d", code)
	}
}

// TestDashboardCannotBeFramed: the dashboard keeps its token in
// localStorage, so no page may frame it (clickjacking): CSP
// frame-ancestors 'none' and X-Frame-Options DENY, on the embedded one and
// on a QUEEN_DASHBOARD_DIR build. Its API calls declare their JSON bodies
// (the API refuses other types with 415).
func TestDashboardCannotBeFramed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("<html>app</html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]http.Handler{"embedded": dashboard.Handler("/dashboard/"), "dir": dashboard.Dir(dir)} {
		for _, path := range []string{"/dashboard/", "/dashboard/app.js", "/"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			if !strings.Contains(rec.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
				rec.Header().Get("X-Frame-Options") != "DENY" {
				t.Errorf("%s %s: %v", name, path, rec.Header())
			}
		}
	}
	_, app := get(t, dashboard.Handler("/dashboard/"), "/dashboard/app.js")
	if strings.Count(app, "fetch(") != 1 || !strings.Contains(app, "headers['Content-Type'] = 'application/json'") {
		t.Error("the dashboard's API calls (one fetch, in api()) no longer declare application/json bodies")
	}
}
