// Package dashboard serves the broker's own dashboard at /dashboard: static
// files embedded in the binary (no build step: plain JavaScript, charts
// drawn as SVG, no library), which read the broker's HTTP API with the
// token the user gives them, and show an action only when GET
// /api/v1/session says the token may take it (the routes refuse it anyway).
//
// Dir serves another static build (QUEEN_DASHBOARD_DIR, such as Queen's own
// dashboard) with history-mode fallback: a path that names no file gets
// index.html, so the app's own router resolves it.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// Handler serves the embedded dashboard under prefix (such as
// "/dashboard/"); the prefix alone serves index.html.
func Handler(prefix string) http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed is part of the binary
	}
	files := http.StripPrefix(strings.TrimSuffix(prefix, "/"), http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every page loads the same files: a new broker's are fetched again.
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
		noFraming(w)
		files.ServeHTTP(w, r)
	})
}

// noFraming forbids every page from framing the dashboard: its token lives
// in localStorage, and a framed dashboard could be clicked through actions
// by a page on top (clickjacking). X-Frame-Options for browsers without CSP
// frame-ancestors; Dir adds the directive alone since another build's own
// policy is not known here.
func noFraming(w http.ResponseWriter) {
	w.Header().Set("X-Frame-Options", "DENY")
	if w.Header().Get("Content-Security-Policy") == "" {
		w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
	}
}

// Dir serves the static build in dir with history-mode fallback. It
// serves nothing outside dir.
func Dir(dir string) http.Handler {
	root := os.DirFS(dir)
	files := http.FileServerFS(root)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name == "" {
			name = "index.html"
		}
		noFraming(w)
		if st, err := fs.Stat(root, name); err != nil || st.IsDir() {
			r = r.Clone(r.Context())
			r.URL.Path = "/"
		}
		files.ServeHTTP(w, r)
	})
}
