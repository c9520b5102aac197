//go:build attack

package attack

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const jwtSecret = "attack-suite-secret"

// roles are the token kinds tried: each JWT role, a valid token with no
// role, and no token at all.
var roles = []string{"admin", "read-write", "read-only", "write-only", "no-role", "no-token"}

// allows is SPEC's table: which role passes which declared level.
func allows(role, level string) bool {
	switch level {
	case "Public":
		return true
	case "Metrics", "ReadOnly":
		return role == "admin" || role == "read-write" || role == "read-only"
	case "ReadWrite":
		return role == "admin" || role == "read-write"
	case "Produce":
		return role == "admin" || role == "read-write" || role == "write-only"
	case "Admin":
		return role == "admin"
	}
	return false
}

func signedToken(role string) string {
	c := jwt.MapClaims{"sub": "attacker-" + role, "exp": time.Now().Add(time.Hour).Unix()}
	if role != "no-role" {
		c["role"] = role
	}
	s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(jwtSecret))
	return s
}

func bearer(role string) []string {
	if role == "no-token" {
		return nil
	}
	return []string{"Authorization: Bearer " + signedToken(role)}
}

// opTable reads the per-op levels of batch routes from queen/httpapi's
// sources (a map from "METHOD /path" to {"op": auth.Level}); where no such
// table exists yet, the timers ops issue 28 names.
func opTable() map[string]map[string]string {
	out := map[string]map[string]string{}
	files, _ := filepath.Glob("../queen/httpapi/*.go")
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			kv, ok := n.(*ast.KeyValueExpr)
			if !ok {
				return true
			}
			route := stringLit(kv.Key)
			ops, ok := kv.Value.(*ast.CompositeLit)
			if !strings.HasPrefix(route, "POST /") || !ok {
				return true
			}
			for _, e := range ops.Elts {
				op, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				if sel, ok := op.Value.(*ast.SelectorExpr); ok && stringLit(op.Key) != "" && isIdent(sel.X, "auth") {
					if out[route] == nil {
						out[route] = map[string]string{}
					}
					out[route][stringLit(op.Key)] = sel.Sel.Name
				}
			}
			return true
		})
	}
	if out["POST /api/v1/timers"] == nil {
		out["POST /api/v1/timers"] = map[string]string{"schedule": "Produce", "reschedule": "ReadWrite", "cancel": "ReadWrite"}
	}
	return out
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func stringLit(e ast.Expr) string {
	if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
		s, _ := strconv.Unquote(b.Value)
		return s
	}
	return ""
}

// opBody is a call of route with the single op op, or "" when the suite
// has no body for it.
func opBody(route, op, pid string) string {
	if route == "POST /api/v1/transaction" {
		switch op {
		case "push":
			return `{"operations":[{"type":"push","items":[{"queue":"victim","partition":"p","transactionId":"denied-op"}]}]}`
		case "ack":
			return fmt.Sprintf(`{"operations":[{"type":"ack","transactionId":"v1","partitionId":%q}]}`, pid)
		}
		return ""
	}
	bodies := map[string]string{
		"schedule":    `{"op":"schedule","queue":"victim","timerKey":"t-denied","txn":"x","delayMs":3600000}`,
		"reschedule":  `{"op":"reschedule","queue":"victim","timerKey":"t1","delayMs":1}`,
		"cancel":      `{"op":"cancel","queue":"victim","timerKey":"t1"}`,
		"get":         `{"op":"get","ns":"ns","key":"k"}`,
		"getMany":     `{"op":"getMany","ns":"ns","keys":["k"]}`,
		"getPrefix":   `{"op":"getPrefix","ns":"ns","prefix":"k"}`,
		"put":         `{"op":"put","ns":"ns","key":"k","value":666,"forever":true}`,
		"putIfAbsent": `{"op":"putIfAbsent","ns":"ns","key":"k-denied","value":1,"forever":true}`,
		"incr":        `{"op":"incr","ns":"ns","key":"k"}`,
		"delete":      `{"op":"delete","ns":"ns","key":"k"}`,
	}
	if b, ok := bodies[op]; ok {
		return "[" + b + "]"
	}
	return ""
}

// routeBody is what a denied call of a route sends: a body that would
// change something were it allowed.
func routeBody(pattern, pid string) string {
	bodies := map[string]string{
		"POST /api/v1/configure":              `{"queue":"victim","options":{"leaseTime":1}}`,
		"POST /api/v1/push":                   `{"items":[{"queue":"victim","partition":"p","transactionId":"denied-push"}]}`,
		"POST /api/v1/ack":                    fmt.Sprintf(`{"transactionId":"v1","partitionId":%q}`, pid),
		"POST /api/v1/ack/batch":              fmt.Sprintf(`{"acknowledgments":[{"transactionId":"v1","partitionId":%q}]}`, pid),
		"POST /api/v1/transaction":            `{"operations":[{"type":"push","items":[{"queue":"victim","partition":"p","transactionId":"denied-txn"}]}]}`,
		"POST /api/v1/system/maintenance":     `{"enabled":true}`,
		"POST /api/v1/system/maintenance/pop": `{"enabled":true}`,
		"POST /api/v1/timers":                 `[{"op":"cancel","queue":"victim","timerKey":"t1"}]`,
		"POST /api/v1/kv":                     `[{"op":"put","ns":"ns","key":"k","value":666,"forever":true}]`,
		"PUT /api/v1/kv/{ns}/{key...}":        `{"value":666,"forever":true}`,
		"POST /api/v1/traces":                 fmt.Sprintf(`{"transactionId":"v1","partitionId":%q,"data":{"x":1}}`, pid),
	}
	if b, ok := bodies[pattern]; ok {
		return b
	}
	if strings.HasPrefix(pattern, "POST ") || strings.HasPrefix(pattern, "PUT ") {
		return `{}`
	}
	return ""
}

// levelsState is what the denied calls must leave as it was.
type levelsState struct {
	pid, timer, kv string
}

// setupVictim makes, as admin, a queue with one message, a timer and a KV
// row for the denied calls to aim at.
func (p *probe) setupVictim(url string) levelsState {
	admin := bearer("admin")
	a := p.do("POST", url+"/api/v1/push", `{"items":[{"queue":"victim","partition":"p","transactionId":"v1"}]}`, admin...)
	var pushed []struct {
		PartitionID string `json:"partitionId"`
	}
	if a.code != 201 || json.Unmarshal(a.body, &pushed) != nil || len(pushed) != 1 {
		p.fatalf("admin push: %s", a)
	}
	if a = p.do("POST", url+"/api/v1/timers", `[{"op":"schedule","queue":"victim","timerKey":"t1","txn":"tx-t1","delayMs":3600000}]`, admin...); a.code != 200 {
		p.fatalf("admin timer: %s", a)
	}
	if a = p.do("POST", url+"/api/v1/kv", `[{"op":"put","ns":"ns","key":"k","value":1,"forever":true}]`, admin...); a.code != 200 {
		p.fatalf("admin kv: %s", a)
	}
	return p.victimState(url, pushed[0].PartitionID)
}

func (p *probe) victimState(url, pid string) levelsState {
	admin := bearer("admin")
	return levelsState{pid: pid,
		timer: string(p.do("GET", url+"/api/v1/timers/victim/t1", "", admin...).body),
		kv:    string(p.do("GET", url+"/api/v1/kv/ns/k", "", admin...).body)}
}

// probeLevels (items 5, 6): a token of every level against every route of
// the table and every op of the batch routes: a lower level gets 403 (no
// token 401) and nothing changes; a read-only token sees no spool path.
func probeLevels(p *probe) {
	routes, err := routeTable()
	if err != nil {
		p.fatalf("%v", err)
	}
	spool := filepath.Join(p.t.TempDir(), "spool")
	b := p.start(p.database(), spool, "JWT_ENABLED=true", "JWT_ALGORITHM=HS256", "JWT_SECRET="+jwtSecret)
	before := p.setupVictim(b.url)
	p.checkTokensWork(b.url)
	vals := map[string]string{"queue": "victim", "partition": "p", "leaseId": "00000000-0000-4000-8000-000000000000",
		"group": "g", "timerKey": "t1", "ns": "ns", "key": "k", "partitionId": before.pid, "transactionId": "v1", "traceName": "tn"}
	tried := 0
	for _, r := range routes {
		pattern := r.method + " " + r.path
		url := b.url + fillPath(r.path, vals) + "?autoAck=true&batch=10&namespace=victim&consumerGroup=g"
		for _, role := range roles {
			if allows(role, r.level) {
				continue
			}
			tried++
			a := p.do(r.method, url, routeBody(pattern, before.pid), bearer(role)...)
			if want := deniedStatus(role); a.code != want {
				p.failf("%s (%s) with %s: %s, want %d", pattern, r.level, role, a, want)
			}
		}
	}
	if a := p.do("GET", b.url+"/api/v1/resources/queues", "", "Authorization: Bearer "); a.code != 401 || !strings.Contains(string(a.body), "Empty token") {
		p.failf("an empty bearer token answered %s, want 401 Empty token", a)
	}
	before = p.scheduleOverExisting(b.url, before)
	ops := p.checkOps(b.url, before.pid)
	p.triedf("%d denied (route, token) pairs over %d routes, %d denied (op, token) pairs", tried, len(routes), ops)
	p.checkVictimUnchanged(b.url, before)
	a := p.do("GET", b.url+"/api/v1/status/buffers", "", bearer("read-only")...)
	if a.code < 400 && strings.Contains(string(a.body), spool) {
		p.failf("a read-only token sees the spool's path in status/buffers: %s", a)
	}
}

func deniedStatus(role string) int {
	if role == "no-token" {
		return 401
	}
	return 403
}

// scheduleOverExisting: schedule creates or replaces, so on an existing
// key it is a reschedule, which a write-only token may not do (issue 28
// item 6). When it got through, the timer is put back as admin so the
// checks after it start from a known state.
func (p *probe) scheduleOverExisting(url string, before levelsState) levelsState {
	a := p.do("POST", url+"/api/v1/timers", `[{"op":"schedule","queue":"victim","timerKey":"t1","txn":"tx-t1","delayMs":1}]`, bearer("write-only")...)
	time.Sleep(200 * time.Millisecond) // a replaced timer due at once fires
	if now := p.victimState(url, before.pid); now.timer != before.timer {
		p.failf("a write-only token replaced timer t1 with op schedule (a reschedule by another name): answered %s; t1 now %s", a, now.timer)
		p.do("POST", url+"/api/v1/timers", `[{"op":"schedule","queue":"victim","timerKey":"t1","txn":"tx-t1","delayMs":3600000}]`, bearer("admin")...)
		return p.victimState(url, before.pid)
	}
	return before
}

// checkTokensWork makes sure each role's token is accepted where it
// should be, so the 403s above are about levels, not a broken token.
func (p *probe) checkTokensWork(url string) {
	for _, role := range []string{"admin", "read-write", "read-only"} {
		if a := p.do("GET", url+"/api/v1/resources/queues", "", bearer(role)...); a.code != 200 {
			p.fatalf("a %s token cannot list queues: %s", role, a)
		}
	}
	if a := p.do("POST", url+"/api/v1/push", `{"items":[{"queue":"wo-ok","transactionId":"wo"}]}`, bearer("write-only")...); a.code != 201 {
		p.fatalf("a write-only token cannot push: %s", a)
	}
}

// checkOps sends each op of each batch route with every token its route
// admits but the op does not; it returns how many it sent.
func (p *probe) checkOps(url, pid string) int {
	n := 0
	levelOf := map[string]string{}
	routes, _ := routeTable()
	for _, r := range routes {
		levelOf[r.method+" "+r.path] = r.level
	}
	for route, ops := range opTable() {
		path := strings.TrimPrefix(route, "POST ")
		for op, level := range ops {
			body := opBody(route, op, pid)
			if body == "" {
				p.failf("no attack body for op %s of %s: add one to opBody", op, route)
				continue
			}
			for _, role := range roles {
				if allows(role, level) || !allows(role, levelOf[route]) {
					continue
				}
				n++
				if a := p.do("POST", url+path, body, bearer(role)...); a.code != 403 {
					p.failf("%s op %s (%s) with %s: %s, want 403", route, op, level, role, a)
				}
			}
		}
	}
	return n
}

// checkVictimUnchanged wants the victim's message unconsumed, its timer and
// KV row as they were, maintenance off and no queue the denied calls named.
func (p *probe) checkVictimUnchanged(url string, before levelsState) {
	admin := bearer("admin")
	if now := p.victimState(url, before.pid); now != before {
		p.failf("denied calls changed state: timer %s -> %s; kv %s -> %s", before.timer, now.timer, before.kv, now.kv)
	}
	for _, path := range []string{"/api/v1/system/maintenance", "/api/v1/system/maintenance/pop"} {
		if a := p.do("GET", url+path, "", admin...); strings.Contains(string(a.body), `"enabled":true`) {
			p.failf("denied calls turned %s on: %s", path, a)
			p.do("POST", url+path, `{"enabled":false}`, admin...)
		}
	}
	for _, name := range p.queueNames(url, admin...) {
		if name != "victim" && name != "wo-ok" {
			p.failf("denied calls created queue %q", name)
		}
	}
	a := p.do("GET", url+"/api/v1/pop/queue/victim/partition/p?batch=10", "", admin...)
	if a.code != 200 || !strings.Contains(string(a.body), `"v1"`) || strings.Contains(string(a.body), "denied") {
		p.failf("after the denied calls the victim queue pops %s, want exactly v1", a)
	}
}

const (
	tenantA = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
	tenantB = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
)

// tenantBearer is a token of role for tenant.
func tenantBearer(role, tenant string) []string {
	c := jwt.MapClaims{"sub": "attacker-" + tenant[:1], "role": role, "tenant": tenant, "exp": time.Now().Add(time.Hour).Unix()}
	s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(jwtSecret))
	return []string{"Authorization: Bearer " + s}
}

// probeTenancy: tenant B's admin token, aimed at tenant A's queue, its
// message, partition and lease by every route that names them, sees and
// changes nothing; naming A in x-queen-tenant is 403.
func probeTenancy(p *probe) {
	b := p.start(p.database(), filepath.Join(p.t.TempDir(), "spool"), "JWT_ENABLED=true", "JWT_SECRET="+jwtSecret,
		"QUEEN_TENANCY_HEADER=true")
	asA, asB := tenantBearer("read-write", tenantA), tenantBearer("admin", tenantB)
	if a := p.do("POST", b.url+"/api/v1/push", `{"items":[{"queue":"secret","partition":"p","transactionId":"s1","payload":{"pin":1234}}]}`, asA...); a.code != 201 {
		p.fatalf("tenant A push: %s", a)
	}
	var popped struct {
		Messages []poppedMsg `json:"messages"`
	}
	if a := p.do("GET", b.url+"/api/v1/pop/queue/secret?batch=1", "", asA...); a.code != 200 || json.Unmarshal(a.body, &popped) != nil || len(popped.Messages) != 1 {
		p.fatalf("tenant A pop: %s", a)
	}
	m := popped.Messages[0]
	p.triedf("tenant B's admin token against tenant A's queue, message %s, partition and lease", m.TransactionID)
	reads := []string{"/api/v1/resources/queues", "/api/v1/resources/queues/secret", "/api/v1/messages/" + m.PartitionID + "/s1",
		"/api/v1/traces/" + m.PartitionID + "/s1", "/api/v1/status/queues", "/api/v1/messages?queue=secret", "/api/v1/pop/queue/secret?batch=10",
		"/api/v1/messages/by-transaction?transactionId=s1", "/api/v1/messages/by-transaction?transactionId=s1&queue=secret"}
	for _, path := range reads {
		if a := p.do("GET", b.url+path, "", asB...); strings.Contains(string(a.body), "secret") || strings.Contains(string(a.body), "1234") {
			p.failf("tenant B read tenant A's data through GET %s: %s", path, a)
		}
	}
	if a := p.do("GET", b.url+"/api/v1/resources/queues", "", append(asB, "x-queen-tenant: "+tenantA)...); a.code != 403 {
		p.failf("tenant B's token naming tenant A in x-queen-tenant: %s, want 403", a)
	}
	writes := [][2]string{
		{"/api/v1/ack", ackBody(m)},
		{"/api/v1/ack/batch", `{"acknowledgments":[` + ackBody(m) + `]}`},
		{"/api/v1/lease/" + m.LeaseID + "/extend", `{"seconds":3600}`},
		{"/api/v1/transaction", `{"operations":[{"type":"ack","transactionId":"s1","partitionId":"` + m.PartitionID + `"}],"requiredLeases":["` + m.LeaseID + `"]}`},
		{"/api/v1/messages/" + m.PartitionID + "/s1/retry", `{}`},
	}
	for _, w := range writes {
		if a := p.do("POST", b.url+w[0], w[1], asB...); strings.Contains(string(a.body), `"success":true`) || strings.Contains(string(a.body), `"renewed":1`) {
			p.failf("tenant B acted on tenant A's message through POST %s: %s", w[0], a)
		}
	}
	for _, path := range []string{"/api/v1/resources/queues/secret", "/api/v1/messages/" + m.PartitionID + "/s1"} {
		p.do("DELETE", b.url+path, "", asB...)
	}
	if a := p.do("POST", b.url+"/api/v1/ack", ackBody(m), asA...); a.code != 200 || !strings.Contains(string(a.body), `"success":true`) {
		p.failf("after tenant B's attempts tenant A's own ack answered %s", a)
	}
}
