//go:build attack

package attack

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// pgURL is db as the postgres:// URL QUEEN_SHARDS and QUEEN_CATALOG_URL
// take.
func pgURL(db pg) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(db.user, db.password),
		Host: fmt.Sprintf("%s:%d", db.host, db.port), Path: "/" + db.name, RawQuery: "sslmode=disable"}
	return u.String()
}

// probeShards attacks a broker with a catalogue and two shards through
// the move routes: only an admin moves, and only its own tenant's queues;
// another tenant's move and placements stay hidden; hostile bodies and
// queries answer 4xx and plan nothing; and a move that cannot be done
// (this cluster has no wal_level=logical) fails with its reason, rolled
// back, the queue served on its shard as before with nothing lost.
func probeShards(p *probe) {
	catalog, s0, s1 := p.database(), p.database(), p.database()
	b := p.start(s0, filepath.Join(p.t.TempDir(), "spool"), "JWT_ENABLED=true", "JWT_SECRET="+jwtSecret,
		"QUEEN_TENANCY_HEADER=true", "QUEEN_CATALOG_URL="+pgURL(catalog), "QUEEN_SHARDS=s0="+pgURL(s0)+";s1="+pgURL(s1))
	adminA, writerA, adminB := tenantBearer("admin", tenantA), tenantBearer("read-write", tenantA), tenantBearer("admin", tenantB)
	if a := p.do("POST", b.url+"/api/v1/push", `{"items":[{"queue":"secret","partition":"p","transactionId":"s1","payload":{"pin":1234}}]}`, writerA...); a.code != 201 {
		p.fatalf("tenant A push: %s", a)
	}
	move := b.url + "/api/v1/admin/queues/secret/move"
	p.triedf("a read-write token, another tenant's admin, and hostile bodies against %s", move)
	if a := p.do("POST", move, `{"to":"s1"}`, writerA...); a.code != 403 {
		p.failf("a read-write token moved a queue: %s, want 403", a)
	}
	if a := p.do("POST", move, `{"to":"s1"}`, adminB...); a.code != 404 {
		p.failf("tenant B's admin moving tenant A's queue: %s, want 404", a)
	}
	for _, body := range []string{`{"to":{"$ne":1}}`, `{"to":"` + strings.Repeat("s", 70000) + `"}`, `{"to":"s1'; DROP TABLE queen.queues; --"}`,
		`{"to":null}`, `[]`, `{"to":"s0"}`} {
		if a := p.do("POST", move, body, adminA...); a.code < 400 || a.code >= 500 {
			p.failf("move body %.60q: %s, want a 4xx", body, a)
		}
	}
	for _, path := range []string{"/api/v1/admin/placements?limit=100000000", "/api/v1/admin/placements?limit=-1",
		"/api/v1/admin/moves/..%2f..%2fplacements", "/api/v1/admin/moves/' OR 1=1 --"} {
		if a := p.do("GET", b.url+path, "", adminA...); a.code < 400 || a.code >= 500 {
			p.failf("GET %s: %s, want a 4xx", path, a)
		}
	}
	if a := p.do("GET", b.url+"/api/v1/admin/placements", "", adminB...); a.code != 200 || strings.Contains(string(a.body), "secret") {
		p.failf("tenant B's placements: %s, want 200 without tenant A's queue", a)
	}

	a := p.do("POST", move, `{"to":"s1"}`, adminA...)
	var started struct{ MoveID string }
	if a.code != 202 || json.Unmarshal(a.body, &started) != nil {
		p.fatalf("tenant A's admin moving its queue: %s, want 202", a)
	}
	if a := p.do("GET", b.url+"/api/v1/admin/moves/"+started.MoveID, "", adminB...); a.code != 404 {
		p.failf("tenant B read tenant A's move: %s, want 404", a)
	}
	p.triedf("a move this cluster cannot make (no wal_level=logical): move %s", started.MoveID)
	var st struct{ State, Reason string }
	for deadline := time.Now().Add(60 * time.Second); st.State != "failed" && st.State != "done"; time.Sleep(100 * time.Millisecond) {
		a := p.do("GET", b.url+"/api/v1/admin/moves/"+started.MoveID, "", adminA...)
		if a.code != 200 || json.Unmarshal(a.body, &st) != nil || time.Now().After(deadline) {
			p.fatalf("the move's state: %s", a)
		}
	}
	if st.State != "failed" || st.Reason == "" {
		p.failf("the impossible move ended %q (%q), want failed with a reason", st.State, st.Reason)
	}
	p.triedf("it failed: %.120s", st.Reason)
	if a := p.do("POST", b.url+"/api/v1/push", `{"items":[{"queue":"secret","partition":"p","transactionId":"s2","payload":{"pin":5678}}]}`, writerA...); a.code != 201 {
		p.failf("push after the failed move: %s", a)
	}
	a = p.do("GET", b.url+"/api/v1/pop/queue/secret?batch=10", "", writerA...)
	var popped struct {
		Messages []poppedMsg `json:"messages"`
	}
	if a.code != 200 || json.Unmarshal(a.body, &popped) != nil || len(popped.Messages) != 2 ||
		popped.Messages[0].TransactionID != "s1" || popped.Messages[1].TransactionID != "s2" {
		p.failf("after the failed move the queue gave %s, want s1 then s2", a)
	}
}
