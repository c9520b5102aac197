package httpapi_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/queen-go/queen/queen/config"
)

const (
	tenantA = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
	tenantB = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
)

// tenantToken is a read-write token; tenant "" leaves the claim out.
func tenantToken(t *testing.T, tenant any) string {
	t.Helper()
	claims := jwt.MapClaims{"sub": "s", "role": "read-write", "exp": time.Now().Add(time.Hour).Unix()}
	if tenant != "" {
		claims["tenant"] = tenant
	}
	return signed(t, claims)
}

// With JWT on, the tenant is the token's: its tenant claim, or the default
// tenant without one. A header that disagrees is refused, whatever
// QUEEN_TENANCY_HEADER says; before, any valid token could pick any tenant
// through x-queen-tenant.
func TestTenantComesFromTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.JWTEnabled, c.JWT.Secret, c.TenancyHeader = true, "test-secret", true
	})
	a, none := tenantToken(t, tenantA), tenantToken(t, "")
	push := func(q string) map[string]any {
		return map[string]any{"items": []any{map[string]any{"queue": q, "payload": 1}}}
	}
	// The claim decides, with or without an agreeing header.
	e.expect(e.do("POST", "/api/v1/push", push("ta"), "Authorization", a), 201)
	e.expect(e.do("POST", "/api/v1/push", push("ta"), "Authorization", a, "x-queen-tenant", tenantA), 201)
	// A header naming another tenant is refused, for a token with a claim
	// and for one without (which is the default tenant's).
	for _, tc := range []struct{ name, token, header string }{
		{"claim A, header B", a, tenantB},
		{"no claim, header B", none, tenantB},
	} {
		if r := e.do("POST", "/api/v1/push", push("tb"), "Authorization", tc.token, "x-queen-tenant", tc.header); r.status != 403 {
			t.Fatalf("%s: push answered %d %s, want 403", tc.name, r.status, r.body)
		}
		if r := e.do("GET", "/api/v1/pop/queue/ta", nil, "Authorization", tc.token, "x-queen-tenant", tc.header); r.status != 403 {
			t.Fatalf("%s: pop answered %d %s, want 403", tc.name, r.status, r.body)
		}
	}
	// What tenant A pushed is A's: the default tenant's token sees none of it.
	e.expect(e.do("GET", "/api/v1/pop/queue/ta", nil, "Authorization", none), 204)
	if p := e.pop("/api/v1/pop/queue/ta?batch=10", "Authorization", a); p == nil || len(p.Messages) != 2 {
		t.Fatalf("tenant A's pop: %+v", p)
	}
	// A claim that is not a tenant id is refused.
	for _, bad := range []any{"not-a-uuid", 42} {
		if r := e.do("GET", "/api/v1/resources/queues", nil, "Authorization", tenantToken(t, bad)); r.status != 403 {
			t.Fatalf("claim %v: %d %s, want 403", bad, r.status, r.body)
		}
	}
}

// QUEEN_TENANT_TRUST_HEADER: with JWT on, the header decides (a gateway
// sets it), the claim is not read.
func TestTrustedTenantHeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.JWTEnabled, c.JWT.Secret, c.TenancyHeader, c.TrustTenantHeader = true, "test-secret", true, true
	})
	a := tenantToken(t, tenantA)
	e.expect(e.do("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "tq", "payload": 1}}},
		"Authorization", a, "x-queen-tenant", tenantB), 201)
	e.expect(e.do("GET", "/api/v1/pop/queue/tq", nil, "Authorization", a), 204) // not A's
	if p := e.pop("/api/v1/pop/queue/tq", "Authorization", a, "x-queen-tenant", tenantB); p == nil || len(p.Messages) != 1 {
		t.Fatalf("B's pop through the trusted header: %+v", p)
	}
}

// Without JWT the header decides when QUEEN_TENANCY_HEADER is on, and is
// ignored when it is off.
func TestTenantHeaderWithoutJWT(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		e := newEnv(t, func(c *config.Config) { c.TenancyHeader = on })
		e.expect(e.do("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "hq", "payload": 1}}},
			"x-queen-tenant", tenantB), 201)
		want := 204 // the message is B's
		if !on {
			want = 200 // the header was ignored: the default tenant's
		}
		e.expect(e.do("GET", "/api/v1/pop/queue/hq", nil), want)
	}
}

// With JWT on, the metrics routes need a read-only token, the scrape
// token, or a request from an allowed network; before, they were open.
func TestMetricsFollowTheAccessLevels(t *testing.T) {
	t.Parallel()
	secured := newEnv(t, func(c *config.Config) {
		c.JWTEnabled, c.JWT.Secret, c.JWT.ScrapeToken = true, "test-secret", "scrape-me"
	})
	for _, path := range []string{"/metrics", "/metrics/prometheus"} {
		secured.expect(secured.do("GET", path, nil), 401)
		secured.expect(secured.do("GET", path, nil, "Authorization", "Bearer wrong"), 401)
		secured.expect(secured.do("GET", path, nil, "Authorization", "Bearer scrape-me"), 200)
		secured.expect(secured.do("GET", path, nil, "Authorization", token(t, "m", "read-only")), 200)
	}
	// The scrape token opens the scrapes only.
	secured.expect(secured.do("GET", "/api/v1/resources/queues", nil, "Authorization", "Bearer scrape-me"), 401)
	fromHere := newEnv(t, func(c *config.Config) {
		c.JWTEnabled, c.JWT.Secret = true, "test-secret"
		c.JWT.ScrapeNets = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	})
	fromHere.expect(fromHere.do("GET", "/metrics/prometheus", nil), 200)
	fromHere.expect(fromHere.do("GET", "/api/v1/resources/queues", nil), 401)
	elsewhere := newEnv(t, func(c *config.Config) {
		c.JWTEnabled, c.JWT.Secret = true, "test-secret"
		c.JWT.ScrapeNets = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	})
	elsewhere.expect(elsewhere.do("GET", "/metrics/prometheus", nil), 401)
}

// scrapeQueues reads /metrics/prometheus (with headers) and returns the
// queue labels of family name.
func scrapeQueues(t *testing.T, e *env, name string, headers ...string) map[string]bool {
	t.Helper()
	r := e.expect(e.do("GET", "/metrics/prometheus", nil, headers...), 200)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	if f, ok := fams[name]; ok {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "queue" {
					out[l.GetValue()] = true
				}
			}
		}
	}
	return out
}

// Client-chosen queue names cannot grow the metrics without bound: past
// QUEEN_METRICS_MAX_QUEUES queues, the per-queue families count under
// "_overflow"; a deleted queue's series go, and its place comes back.
// Before, every queue ever pushed kept its series forever.
func TestQueueSeriesAreCappedAndDeletedWithTheQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.MetricsMaxQueues = 3 })
	for _, q := range []string{"m0", "m1", "m2", "m3", "m4"} {
		e.push(item{"queue": q, "payload": 1})
	}
	counted := scrapeQueues(t, e, "queen_queue_messages_total")
	if len(counted) != 4 || !counted["m0"] || !counted["m1"] || !counted["m2"] || !counted["_overflow"] {
		t.Fatalf("queue_messages_total queues: %v, want m0 m1 m2 _overflow", counted)
	}
	if depth := scrapeQueues(t, e, "queen_queue_depth"); len(depth) != 4 || !depth["_overflow"] {
		t.Fatalf("queue_depth queues: %v, want three and _overflow", depth)
	}
	e.expect(e.do("DELETE", "/api/v1/resources/queues/m0", nil), 200)
	e.push(item{"queue": "m5", "payload": 1})
	counted = scrapeQueues(t, e, "queen_queue_messages_total")
	if counted["m0"] || !counted["m5"] {
		t.Fatalf("after deleting m0 and pushing m5: %v", counted)
	}
}

// A tenant's own token scrapes only its tenant's per-queue series; the
// scrape token (an operator's) sees every tenant's.
func TestTenantTokenScrapesItsOwnQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) {
		c.JWTEnabled, c.JWT.Secret, c.JWT.ScrapeToken = true, "test-secret", "scrape-me"
	})
	a, b := tenantToken(t, tenantA), tenantToken(t, tenantB)
	e.expect(e.do("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "qa", "payload": 1}}}, "Authorization", a), 201)
	e.expect(e.do("POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "qb", "payload": 1}}}, "Authorization", b), 201)
	if got := scrapeQueues(t, e, "queen_queue_messages_total", "Authorization", a); !got["qa"] || got["qb"] {
		t.Fatalf("tenant A's scrape: %v", got)
	}
	if got := scrapeQueues(t, e, "queen_queue_depth", "Authorization", a); !got["qa"] || got["qb"] {
		t.Fatalf("tenant A's depth scrape: %v", got)
	}
	if got := scrapeQueues(t, e, "queen_queue_messages_total", "Authorization", "Bearer scrape-me"); !got["qa"] || !got["qb"] {
		t.Fatalf("the operator's scrape: %v", got)
	}
}
