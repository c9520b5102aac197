package httpapi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/queen-go/queen/queen/auth"
)

// headSafe are the GET routes HEAD may reach. Go's mux serves HEAD with a
// GET pattern's handler, so a HEAD on a pop would claim (and with autoAck
// consume) messages and answer no body. Every other route refuses HEAD with
// 405 (TestHeadOnlyWhereGetHasNoEffect walks the route table).
var headSafe = map[string]bool{"GET /health": true, "GET /dashboard": true, "GET /dashboard/": true, "GET /favicon.ico": true,
	"GET /": true}

// opLevels is the level each op of a batch route needs.
type opLevels map[string]auth.Level

// batchOps declares, beside the route table, the level of every op a batch
// route takes: the level belongs to the operation, not the route. The
// route's own level (checked by the middleware) is the floor; the handler
// checks each op of a call against this table before doing anything, so a
// write-only token may schedule a timer but not cancel or reschedule one
// (DELETE of the same timer needs read-write too).
var batchOps = map[string]opLevels{
	"POST /api/v1/timers": {"schedule": auth.Produce, "reschedule": auth.ReadWrite, "cancel": auth.ReadWrite},
	"POST /api/v1/kv": {"get": auth.ReadWrite, "getMany": auth.ReadWrite, "getPrefix": auth.ReadWrite, "put": auth.ReadWrite,
		"putIfAbsent": auth.ReadWrite, "incr": auth.ReadWrite, "delete": auth.ReadWrite},
	"POST /api/v1/transaction": {"push": auth.ReadWrite, "ack": auth.ReadWrite},
}

// opsAllowed checks the ops of a batch call (op[i] is operations[i]'s op)
// against the levels its route declares: the first op the caller's token
// may not run answers 403 naming it, before anything is written. Without
// auth every op passes.
func (s *Server) opsAllowed(r *http.Request, ops []string) *badRequest {
	pattern, _ := r.Context().Value(patternKey).(string)
	levels := batchOps[pattern]
	who, _ := r.Context().Value(principalKey).(auth.Principal)
	for i, op := range ops {
		level, ok := levels[op]
		if !ok {
			level = auth.Admin // an op the table does not name: the highest level, never a free pass
		}
		if !s.auth.Allows(who, level) {
			return &badRequest{http.StatusForbidden, fmt.Sprintf("Insufficient permissions: operations[%d].op %s needs the %s level", i, op, levelName(level))}
		}
	}
	return nil
}

func levelName(l auth.Level) string {
	switch l {
	case auth.Produce:
		return "write-only (produce)"
	case auth.ReadOnly:
		return "read-only"
	case auth.ReadWrite:
		return "read-write"
	case auth.Admin:
		return "admin"
	}
	return "public"
}

// allowedMethods maps each path of the route table to the methods it
// answers, for the Allow header of a 405.
func allowedMethods(patterns []string) map[string]string {
	byPath := map[string][]string{}
	for _, p := range patterns {
		method, path, _ := strings.Cut(p, " ")
		byPath[path] = append(byPath[path], method)
		if headSafe[p] {
			byPath[path] = append(byPath[path], http.MethodHead)
		}
	}
	out := make(map[string]string, len(byPath))
	for path, ms := range byPath {
		slices.Sort(ms)
		out[path] = strings.Join(slices.Compact(ms), ", ")
	}
	return out
}

// refuseHead answers a HEAD that reached a GET route not declared safe for
// it: 405 with the methods the path does answer.
func refuseHead(w http.ResponseWriter, pattern string, allow map[string]string) {
	_, path, _ := strings.Cut(pattern, " ")
	w.Header().Set("Allow", allow[path])
	// A HEAD answer has no body; the status says it all.
	w.WriteHeader(http.StatusMethodNotAllowed)
}

// originAllowed reports whether QUEEN_CORS_ORIGINS lets a browser page of
// origin call the API: listed, or "*" listed. "" (a request that names no
// origin) passes only "*".
func (s *Server) originAllowed(origin string) bool {
	for _, o := range s.cfg.CORSOrigins {
		if o == "*" || (origin != "" && strings.EqualFold(o, origin)) {
			return true
		}
	}
	return false
}

// cors sets the CORS answer headers for an allowed origin and answers
// preflights. It reports whether the request was answered. Without
// QUEEN_CORS_ORIGINS no header is ever set and a preflight is refused, so
// a browser page of another origin can neither send a non-simple request
// nor read any answer.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	h := w.Header()
	if len(s.cfg.CORSOrigins) > 0 {
		h.Add("Vary", "Origin")
	}
	allowed := origin != "" && s.originAllowed(origin)
	if allowed {
		if slices.Contains(s.cfg.CORSOrigins, "*") {
			h.Set("Access-Control-Allow-Origin", "*")
		} else {
			h.Set("Access-Control-Allow-Origin", origin)
		}
	}
	if r.Method != http.MethodOptions {
		return false
	}
	if origin == "" || r.Header.Get("Access-Control-Request-Method") == "" {
		w.WriteHeader(http.StatusNoContent) // a plain OPTIONS, not a browser's preflight
		return true
	}
	if !allowed {
		writeError(w, http.StatusForbidden, fmt.Sprintf("origin %q is not allowed (QUEEN_CORS_ORIGINS)", origin))
		return true
	}
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
	h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization, x-queen-tenant")
	h.Set("Access-Control-Max-Age", "86400")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// crossSiteRefused reports whether r is a browser request from a page of
// another origin that QUEEN_CORS_ORIGINS does not list. Browsers mark
// every request with Sec-Fetch-Site; an older one without it is judged by
// its Origin against Host. A pop is a GET, so a page could otherwise make a
// "simple" request (an image, a no-cors fetch) that claims messages
// without a preflight. Non-browser clients send neither header and pass.
func (s *Server) crossSiteRefused(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "cross-site", "same-site":
		return !s.originAllowed(origin)
	}
	if origin == "" {
		return false
	}
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host) {
		return false
	}
	return !s.originAllowed(origin)
}

// isJSONType reports whether a media type is JSON: application/json or an
// application/*+json type.
func isJSONType(mt string) bool {
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// errNotJSON is a body of another media type than JSON.
var errNotJSON = errors.New("not JSON")

// jsonBodyOnly refuses a request body that is not declared JSON, so a
// browser's "simple" request (text/plain, a form, a typeless Blob), which
// needs no preflight, cannot reach a JSON route. A request without a body,
// or with an empty one, passes whatever it declares: clients POST acks and
// lease extensions with no body and no Content-Type. It returns the body to
// read on (a chunked body's first byte was peeked).
func jsonBodyOnly(r *http.Request) (io.ReadCloser, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err == nil && isJSONType(mt) {
			return r.Body, nil
		}
	}
	switch {
	case r.ContentLength == 0:
		return r.Body, nil
	case r.ContentLength > 0:
		return r.Body, errNotJSON
	}
	// Chunked: the length is unknown until the first byte.
	br := bufio.NewReaderSize(r.Body, 16)
	if _, err := br.Peek(1); errors.Is(err, io.EOF) {
		return struct {
			io.Reader
			io.Closer
		}{br, r.Body}, nil
	} else if err != nil {
		return r.Body, fmt.Errorf("reading body: %w", err)
	}
	return r.Body, errNotJSON
}

// writeNotJSON answers 415 naming the type a body must declare.
func writeNotJSON(w http.ResponseWriter, r *http.Request) {
	got := r.Header.Get("Content-Type")
	if got == "" {
		got = "none"
	}
	w.Header().Set("Accept-Post", "application/json")
	writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type must be application/json (got %s)", fmt.Sprintf("%q", got)))
}
