package auth

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queen-go/queen/queen/clock"
)

// jwksServer serves one RSA key as kid "k1"; hold makes later fetches
// wait until released, fail makes them answer 500.
type jwksServer struct {
	*httptest.Server
	key     *rsa.PrivateKey
	fetches atomic.Int64
	mu      sync.Mutex
	hold    chan struct{}
	fail    bool
}

func newJWKSServer(t *testing.T) *jwksServer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s := &jwksServer{key: k}
	b64 := base64.RawURLEncoding
	set := map[string]any{"keys": []any{map[string]any{"kty": "RSA", "kid": "k1",
		"n": b64.EncodeToString(k.N.Bytes()), "e": b64.EncodeToString(big.NewInt(int64(k.E)).Bytes())}}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		hold, fail := s.hold, s.fail
		s.mu.Unlock()
		if hold != nil {
			<-hold
		}
		if fail {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(s.Close)
	return s
}

func jwksAuth(t *testing.T, url string, c clock.Clock) *Authenticator {
	t.Helper()
	cfg := baseConfig()
	cfg.Algorithm, cfg.Secret, cfg.JWKSURL, cfg.JWKSRefresh, cfg.JWKSTimeout = "RS256", "", url, time.Hour, 10*time.Second
	a, err := New(cfg, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// within fails unless f returns within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s took longer than %v", what, d)
	}
}

// A token with a random kid (no valid signature needed) triggers a fetch,
// but the fetch holds no lock: a request whose key is cached answers at
// once while the fetch hangs, and the random-kid request itself waits at
// most waitBound. Before, one mutex was held for the whole fetch, and every
// JWKS-authenticated request waited up to the fetch timeout.
func TestJWKSFetchNeverHoldsOtherRequests(t *testing.T) {
	srv := newJWKSServer(t)
	a := jwksAuth(t, srv.URL, nil)
	good := sign(t, jwt.SigningMethodRS256, srv.key, claims("admin"), "k1")
	if _, e := a.Check(request(good), Admin); e != nil {
		t.Fatalf("first use: %v", e)
	}
	release := make(chan struct{})
	srv.mu.Lock()
	srv.hold = release
	srv.mu.Unlock()
	defer close(release)
	a.jwks.mu.Lock()
	a.jwks.fetched = a.jwks.fetched.Add(-time.Minute) // past the unknown-kid rate limit
	a.jwks.mu.Unlock()
	random := sign(t, jwt.SigningMethodRS256, srv.key, claims("admin"), "random-kid")
	within(t, 3*waitBound, "a random kid's request while the fetch hangs", func() {
		if _, e := a.Check(request(random), Admin); e == nil || e.Status != 401 {
			t.Errorf("random kid: %v", e)
		}
	})
	within(t, waitBound/2, "a cached kid's request while the fetch hangs", func() {
		if _, e := a.Check(request(good), Admin); e != nil {
			t.Errorf("cached kid during a fetch: %v", e)
		}
	})
}

// Random kids cost no fetch each: one kid a fetch did not find is answered
// unknown at once, and new ones refetch at most every unknownKidRefetch.
func TestUnknownKidsAreCachedAndRateLimited(t *testing.T) {
	srv := newJWKSServer(t)
	a := jwksAuth(t, srv.URL, nil)
	for i := range 200 {
		kid := "kid-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if _, e := a.Check(request(sign(t, jwt.SigningMethodRS256, srv.key, claims("admin"), kid)), Admin); e == nil || e.Status != 401 {
			t.Fatalf("kid %s: %v", kid, e)
		}
	}
	if n := srv.fetches.Load(); n > 2 {
		t.Fatalf("200 unknown kids fetched the JWKS %d times", n)
	}
	if _, ok := a.jwks.unknown["kid-aa"]; !ok {
		t.Fatal("an unknown kid was not remembered")
	}
}

// A refresh that fails keeps the previous keys serving.
func TestFailedRefreshKeepsThePreviousKeys(t *testing.T) {
	srv := newJWKSServer(t)
	sim := clock.NewSim(time.Now())
	a := jwksAuth(t, srv.URL, sim)
	good := sign(t, jwt.SigningMethodRS256, srv.key, claims("admin", "exp", time.Now().Add(24*time.Hour).Unix()), "k1")
	if _, e := a.Check(request(good), Admin); e != nil {
		t.Fatalf("first use: %v", e)
	}
	srv.mu.Lock()
	srv.fail = true
	srv.mu.Unlock()
	sim.Advance(2 * time.Hour) // past JWT_JWKS_REFRESH_INTERVAL
	before := srv.fetches.Load()
	for range 3 {
		if _, e := a.Check(request(good), Admin); e != nil {
			t.Fatalf("while the refresh fails: %v", e)
		}
	}
	waitFetches(t, srv, before+1)
}

func waitFetches(t *testing.T, srv *jwksServer, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for srv.fetches.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d fetches, want %d", srv.fetches.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
