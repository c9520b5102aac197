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
