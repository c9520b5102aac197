package httpapi_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queen-go/queen/queen/config"
)

func token(t *testing.T, sub, role string) string {
	return signed(t, jwt.MapClaims{"sub": sub, "role": role, "exp": time.Now().Add(time.Hour).Unix()})
}

// signed is an Authorization header with claims signed by the test secret.
func signed(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte("test-secret"))
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + s
}

// TestJWTLevelsAndProducerSub: with JWT_ENABLED, every route but health
// needs a token whose role meets the route's level, and a push is
// stamped with the token's sub, never the body's producerSub.
func TestJWTLevelsAndProducerSub(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.JWTEnabled, c.JWT.Secret = true, "test-secret"
	})
	rw, ro, wo, admin := token(t, "alice", "read-write"), token(t, "bob", "read-only"), token(t, "carol", "write-only"), token(t, "root", "admin")
	push := map[string]any{"items": []any{map[string]any{"queue": "jq", "payload": 1, "producerSub": "attacker"}}}
	if r := e.do("POST", "/api/v1/push", push); r.status != 401 || r.obj(t)["error"] != "Authentication required" {
		t.Fatalf("push without a token: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/api/v1/push", push, "Authorization", ro); r.status != 403 || r.obj(t)["error"] != "Insufficient permissions" {
		t.Fatalf("push with a read-only token: %d %s", r.status, r.body)
	}
	e.expect(e.do("POST", "/api/v1/push", push, "Authorization", rw), 201)
	e.expect(e.do("POST", "/api/v1/push", push, "Authorization", wo), 201)
	if r := e.do("GET", "/api/v1/pop/queue/jq", nil, "Authorization", wo); r.status != 403 {
		t.Fatalf("pop with a write-only token: %d", r.status)
	}
	p := e.pop("/api/v1/pop/queue/jq?batch=10", "Authorization", rw)
	if p == nil || len(p.Messages) != 2 {
		t.Fatalf("pop: %+v", p)
	}
	subs := map[string]bool{}
	for _, m := range p.Messages {
		if m.ProducerSub != nil {
			subs[*m.ProducerSub] = true
		}
	}
	if !subs["alice"] || !subs["carol"] || len(subs) != 2 {
		t.Fatalf("producerSub must be the token's sub, never the body's: %v", subs)
	}
	e.expect(e.do("GET", "/health", nil), 200)
	e.expect(e.do("GET", "/metrics", nil), 401) // the scrapes follow the access levels
	e.expect(e.do("GET", "/metrics", nil, "Authorization", ro), 200)
	e.expect(e.do("GET", "/api/v1/resources/queues", nil, "Authorization", ro), 200)
	e.expect(e.do("GET", "/api/v1/system/maintenance", nil, "Authorization", rw), 403)
	e.expect(e.do("GET", "/api/v1/system/maintenance", nil, "Authorization", admin), 200)
	e.expect(e.do("DELETE", "/api/v1/resources/queues/jq", nil, "Authorization", rw), 403)
	if r := e.do("GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer not.a.token"); r.status != 401 {
		t.Fatalf("a malformed token: %d %s", r.status, r.body)
	}
}
