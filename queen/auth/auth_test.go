package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func baseConfig() Config {
	return Config{Algorithm: "HS256", Secret: "s3cret", ClockSkew: 30 * time.Second, SkipPaths: []string{"/health", "/public/"},
		RolesClaim: "role", RolesArrayClaim: "roles", RoleAdmin: "admin", RoleReadWrite: "read-write",
		RoleReadOnly: "read-only", RoleWriteOnly: "write-only"}
}

func sign(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func request(token string) *http.Request {
	r := httptest.NewRequest("GET", "/api/v1/push", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

func claims(role string, extra ...any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "alice", "role": role, "exp": time.Now().Add(time.Hour).Unix()}
	for i := 0; i+1 < len(extra); i += 2 {
		c[extra[i].(string)] = extra[i+1]
	}
	return c
}

func TestHMACTokensRolesAndLevels(t *testing.T) {
	a, err := New(baseConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, []byte("s3cret"), c, "") }
	cases := []struct {
		token  string
		level  Level
		status int
		msg    string
	}{
		{"", ReadOnly, 401, "Authentication required"},
		{hs(claims("read-write")), ReadWrite, 0, ""},
		{hs(claims("read-only")), ReadWrite, 403, "Insufficient permissions"},
		{hs(claims("read-only")), ReadOnly, 0, ""},
		{hs(claims("write-only")), Produce, 0, ""},
		{hs(claims("write-only")), ReadOnly, 403, "Insufficient permissions"},
		{hs(claims("read-write")), Admin, 403, "Insufficient permissions"},
		{hs(jwt.MapClaims{"sub": "x", "roles": []any{"viewer", "admin"}}), Admin, 0, ""},
		{hs(claims("nobody")), ReadOnly, 403, "Insufficient permissions"},
		{hs(claims("admin", "exp", time.Now().Add(-time.Hour).Unix())), ReadOnly, 401, "Token has expired"},
		{hs(claims("admin", "exp", time.Now().Add(-10*time.Second).Unix())), ReadOnly, 0, ""}, // within the skew
		{hs(claims("admin", "nbf", time.Now().Add(time.Hour).Unix())), ReadOnly, 401, "Token not yet valid"},
		{hs(claims("admin", "iat", time.Now().Add(time.Hour).Unix())), ReadOnly, 401, "Token issued in the future"},
		{sign(t, jwt.SigningMethodHS256, []byte("wrong"), claims("admin"), ""), ReadOnly, 401, "Invalid token signature"},
		{"not.a.jwt", ReadOnly, 401, "Token decode error"},
		{sign(t, jwt.SigningMethodHS512, []byte("s3cret"), claims("admin"), ""), ReadOnly, 0, ""}, // the HS family
	}
	for i, c := range cases {
		p, e := a.Check(request(c.token), c.level)
		switch {
		case c.status == 0 && e != nil:
			t.Errorf("case %d: refused: %v", i, e)
		case c.status != 0 && (e == nil || e.Status != c.status || !strings.Contains(e.Msg, c.msg)):
			t.Errorf("case %d: got %+v, want %d %q", i, e, c.status, c.msg)
		case c.status == 0 && p.Sub == "":
			t.Errorf("case %d: no sub", i)
		}
	}
	none := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJ4Iiwicm9sZSI6ImFkbWluIn0."
	if _, e := a.Check(request(none), ReadOnly); e == nil || e.Status != 401 {
		t.Fatalf("alg none accepted: %v", e)
	}
	if _, e := a.Check(httptest.NewRequest("GET", "/public/x", nil), Admin); e != nil {
		t.Fatalf("a skip path prefix: %v", e)
	}
	if _, e := a.Check(httptest.NewRequest("GET", "/healthz", nil), ReadOnly); e == nil {
		t.Fatal("/healthz matched the exact skip path /health")
	}
}

func TestIssuerAudienceAndAlgorithmFamily(t *testing.T) {
	cfg := baseConfig()
	cfg.Issuer, cfg.Audience = "https://issuer", "queen"
	a, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("s3cret")
	for _, c := range []struct {
		claims jwt.MapClaims
		msg    string
	}{
		{claims("admin", "iss", "https://issuer", "aud", "queen"), ""},
		{claims("admin", "iss", "https://issuer", "aud", []any{"other", "queen"}), ""},
		{claims("admin", "iss", "https://evil", "aud", "queen"), "Invalid token issuer"},
		{claims("admin", "iss", "https://issuer", "aud", "other"), "Invalid token audience"},
	} {
		_, e := a.Check(request(sign(t, jwt.SigningMethodHS256, key, c.claims, "")), ReadOnly)
		if (c.msg == "" && e != nil) || (c.msg != "" && (e == nil || e.Msg != c.msg)) {
			t.Errorf("%v: got %v, want %q", c.claims, e, c.msg)
		}
	}
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	der, _ := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	cfg = baseConfig()
	cfg.Algorithm, cfg.Secret, cfg.PublicKeyPEM = "RS256", "", string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	rs, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, e := rs.Check(request(sign(t, jwt.SigningMethodRS384, rk, claims("admin"), "")), Admin); e != nil {
		t.Fatalf("RS384 token with RS256 configured (the family): %v", e)
	}
	if _, e := rs.Check(request(sign(t, jwt.SigningMethodHS256, []byte("x"), claims("admin"), "")), Admin); e == nil || e.Msg != "Token uses HS256, expected RS256" {
		t.Fatalf("an HS token against an RS key: %v", e)
	}
}

func TestJWKSKeysByKidWithRefresh(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	b64 := base64.RawURLEncoding
	set := map[string]any{"keys": []any{
		map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": "ed", "x": b64.EncodeToString(pub)},
		map[string]any{"kty": "RSA", "kid": "rsa", "n": b64.EncodeToString(rk.N.Bytes()), "e": b64.EncodeToString(big.NewInt(int64(rk.E)).Bytes())},
	}}
	fetches := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches++
		_ = json.NewEncoder(w).Encode(set)
	}))
	defer srv.Close()
	cfg := baseConfig()
	cfg.Algorithm, cfg.Secret, cfg.JWKSURL = "auto", "", srv.URL
	a, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, e := a.Check(request(sign(t, jwt.SigningMethodEdDSA, priv, claims("admin"), "ed")), Admin); e != nil {
		t.Fatalf("EdDSA from JWKS: %v", e)
	}
	if _, e := a.Check(request(sign(t, jwt.SigningMethodRS256, rk, claims("admin"), "rsa")), Admin); e != nil {
		t.Fatalf("RS256 from JWKS: %v", e)
	}
	if _, e := a.Check(request(sign(t, jwt.SigningMethodRS256, rk, claims("admin"), "gone")), Admin); e == nil || e.Msg != "Unknown key ID: gone" {
		t.Fatalf("unknown kid: %v", e)
	}
	if _, e := a.Check(request(sign(t, jwt.SigningMethodRS256, rk, claims("admin"), "ed")), Admin); e == nil || e.Status != 401 {
		t.Fatalf("an RS token naming an Ed25519 key: %v", e)
	}
	if _, e := a.Check(request(sign(t, jwt.SigningMethodHS256, []byte("x"), claims("admin"), "")), Admin); e == nil || e.Status != 500 {
		t.Fatalf("an HS token with no secret configured: %v", e)
	}
	if fetches != 1 {
		t.Fatalf("fetched the JWKS %d times, want once (an unknown kid refetches at most every 5 s)", fetches)
	}
}

func TestStartupNeedsKeyMaterial(t *testing.T) {
	for _, c := range []struct {
		alg, secret, pem, jwks string
		want                   string
	}{
		{"HS256", "", "", "", "JWT_SECRET"},
		{"RS256", "", "", "", "JWT_PUBLIC_KEY"},
		{"EdDSA", "x", "", "", "JWT_JWKS_URL"},
		{"auto", "", "", "", "auto"},
		{"RS256", "", "not a pem", "", "JWT_PUBLIC_KEY"},
		{"ES256", "x", "", "", "JWT_ALGORITHM"},
	} {
		cfg := baseConfig()
		cfg.Algorithm, cfg.Secret, cfg.PublicKeyPEM, cfg.JWKSURL = c.alg, c.secret, c.pem, c.jwks
		if _, err := New(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c, err, c.want)
		}
	}
}

// TestEmptyBearerToken: "Authorization: Bearer " with nothing after is
// Queen's 401 "Empty token", whatever the spacing or case; before, the
// trimmed header "Bearer" was taken as the token and answered a decode
// error.
func TestEmptyBearerToken(t *testing.T) {
	a, err := New(baseConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"Bearer ", "Bearer", "bearer   ", "BEARER\t"} {
		r := httptest.NewRequest("GET", "/api/v1/push", nil)
		r.Header.Set("Authorization", h)
		if _, e := a.Check(r, ReadOnly); e == nil || e.Status != 401 || e.Msg != "Empty token" {
			t.Errorf("Authorization %q: got %+v, want 401 Empty token", h, e)
		}
	}
	// A header without the scheme is the token itself, as before; one
	// that merely begins with "bearer" is not cut.
	for _, h := range []string{"not.a.jwt", "bearerish.x.y"} {
		r := httptest.NewRequest("GET", "/api/v1/push", nil)
		r.Header.Set("Authorization", h)
		if _, e := a.Check(r, ReadOnly); e == nil || e.Status != 401 || !strings.Contains(e.Msg, "Token decode error") {
			t.Errorf("Authorization %q: got %+v, want a decode error", h, e)
		}
	}
}
