// Package auth checks bearer tokens (JWT) against the access level of a
// route, as Queen does when JWT_ENABLED is on.
//
// Signatures are verified by github.com/golang-jwt/jwt/v5: HMAC (HS256,
// HS384, HS512) with JWT_SECRET, RSA (RS256, RS384, RS512) and EdDSA
// (Ed25519) with a PEM public key (JWT_PUBLIC_KEY) or keys fetched from
// JWT_JWKS_URL. A configured family accepts any algorithm of that family;
// "auto" takes the token's. Then exp, nbf and iat are checked within
// JWT_CLOCK_SKEW, and iss and aud when configured. Roles come from a string
// claim and an array claim; the level a route needs decides which roles
// pass.
package auth

import (
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queen-go/queen/queen/clock"
)

// Level is what a route requires.
type Level int

const (
	// Unset is a route that declared no level: refused, never public.
	Unset     Level = iota
	Public          // health
	Metrics         // the scrapes: an allowed network or the scrape token, else ReadOnly
	ReadOnly        // GET of status, resources, DLQ, messages, KV, timers
	ReadWrite       // pop, ack, transaction, lease, configure, KV and timer writes
	Produce         // push and timer schedule: write-only passes too
	Admin           // system routes, deletes of queues and groups, stats refresh
)

// Config is the JWT configuration (the JWT_* variables).
type Config struct {
	Algorithm       string // HS256 HS384 HS512 RS256 RS384 RS512 EdDSA auto
	Secret          string
	PublicKeyPEM    string
	JWKSURL         string
	JWKSRefresh     time.Duration
	JWKSTimeout     time.Duration
	Issuer          string
	Audience        string
	ClockSkew       time.Duration
	SkipPaths       []string
	RolesClaim      string // role
	RolesArrayClaim string // roles
	RoleAdmin       string // admin
	RoleReadWrite   string // read-write
	RoleReadOnly    string // read-only
	RoleWriteOnly   string // write-only
	// ScrapeNets (QUEEN_METRICS_ALLOW_CIDRS) may scrape the metrics
	// routes without a token; ScrapeToken (QUEEN_METRICS_TOKEN), sent as
	// a bearer token, may too. Otherwise a scrape needs a read-only token.
	ScrapeNets  []netip.Prefix
	ScrapeToken string
	// TenantClaim (QUEEN_TENANT_CLAIM) is the claim naming a token's
	// tenant; a token without it belongs to the default tenant.
	TenantClaim string
}

// Principal is who a valid token names.
type Principal struct {
	Sub   string
	Roles []string
	// Tenant is the token's TenantClaim, "" when it has none.
	Tenant string
	// Verified: a token was checked for this request (not a public or
	// skipped route, nor an allowed scrape).
	Verified bool
}

// Error is a refused request: its status (401, 403, 500) and message.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func unauthorized(format string, a ...any) *Error {
	return &Error{http.StatusUnauthorized, fmt.Sprintf(format, a...)}
}

// Authenticator checks tokens. It is safe for concurrent use.
type Authenticator struct {
	cfg    Config
	clock  clock.Clock
	log    *slog.Logger
	rsaKey *rsa.PublicKey
	edKey  ed25519.PublicKey
	jwks   *jwks
}

// New checks the configuration: key material for the algorithm, a
// parseable PEM. A configuration that could never verify a token is an
// error, so JWT_ENABLED cannot silently let everything through or refuse
// everything.
func New(cfg Config, c clock.Clock, log *slog.Logger) (*Authenticator, error) {
	if c == nil {
		c = clock.Real{}
	}
	a := &Authenticator{cfg: cfg, clock: c, log: log}
	fam := family(cfg.Algorithm)
	switch {
	case fam == "":
		return nil, fmt.Errorf("JWT_ALGORITHM=%q: want HS256, HS384, HS512, RS256, RS384, RS512, EdDSA or auto", cfg.Algorithm)
	case fam == "HS" && cfg.Secret == "":
		return nil, errors.New("JWT_ENABLED with JWT_ALGORITHM=" + cfg.Algorithm + " needs JWT_SECRET")
	case (fam == "RS" || fam == "EdDSA") && cfg.PublicKeyPEM == "" && cfg.JWKSURL == "":
		return nil, errors.New("JWT_ENABLED with JWT_ALGORITHM=" + cfg.Algorithm + " needs JWT_PUBLIC_KEY (PEM) or JWT_JWKS_URL")
	case fam == "auto" && cfg.Secret == "" && cfg.PublicKeyPEM == "" && cfg.JWKSURL == "":
		return nil, errors.New("JWT_ENABLED with JWT_ALGORITHM=auto needs JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL")
	}
	if cfg.PublicKeyPEM != "" {
		if err := a.parsePEM(cfg.PublicKeyPEM); err != nil {
			return nil, fmt.Errorf("JWT_PUBLIC_KEY: %w", err)
		}
	}
	if cfg.JWKSURL != "" {
		a.jwks = newJWKS(cfg.JWKSURL, cfg.JWKSRefresh, cfg.JWKSTimeout, c, log)
	}
	return a, nil
}

func (a *Authenticator) parsePEM(pem string) error {
	if k, err := jwt.ParseRSAPublicKeyFromPEM([]byte(pem)); err == nil {
		a.rsaKey = k
		return nil
	}
	k, err := jwt.ParseEdPublicKeyFromPEM([]byte(pem))
	if err != nil {
		return errors.New("not a PEM RSA or Ed25519 public key")
	}
	a.edKey = k.(ed25519.PublicKey)
	return nil
}

// family is the algorithm family of a configured or token algorithm.
func family(alg string) string {
	switch alg {
	case "HS256", "HS384", "HS512":
		return "HS"
	case "RS256", "RS384", "RS512":
		return "RS"
	case "EdDSA":
		return "EdDSA"
	case "auto":
		return "auto"
	}
	return ""
}

// Skip reports whether path is a JWT_SKIP_PATHS path: an exact match, or a
// prefix match for entries ending in "/" other than "/" itself.
func (a *Authenticator) Skip(path string) bool {
	for _, p := range a.cfg.SkipPaths {
		if p == path || (p != "/" && strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)) {
			return true
		}
	}
	return false
}

// Check authenticates r for a route of the given level.
func (a *Authenticator) Check(r *http.Request, level Level) (Principal, *Error) {
	switch {
	case level == Unset:
		return Principal{}, &Error{http.StatusInternalServerError, "route declares no access level"}
	case level == Public || a.Skip(r.URL.Path):
		return Principal{}, nil
	case level == Metrics && a.scrapeAllowed(r):
		return Principal{}, nil
	case level == Metrics:
		level = ReadOnly
	}
	header := strings.TrimSpace(r.Header.Get("Authorization"))
	if header == "" {
		return Principal{}, unauthorized("Authentication required")
	}
	raw := bearer(header)
	if raw == "" {
		return Principal{}, unauthorized("Empty token")
	}
	p, err := a.verify(raw)
	if err != nil {
		return Principal{}, err
	}
	if !a.allowed(p.Roles, level) {
		return Principal{}, &Error{http.StatusForbidden, "Insufficient permissions"}
	}
	return p, nil
}

// bearer is the token of a trimmed Authorization header: what follows the
// scheme "Bearer" (any case), or the whole header without that scheme.
// "Bearer" alone, as "Authorization: Bearer " arrives once trimmed, is an
// empty token, as Queen answers it, not a token spelled "Bearer".
func bearer(header string) string {
	const scheme = "bearer"
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return header
	}
	rest := header[len(scheme):]
	if rest == "" {
		return ""
	}
	if rest[0] != ' ' && rest[0] != '\t' {
		return header // a token that merely starts with "bearer"
	}
	return strings.TrimSpace(rest)
}

// scrapeAllowed reports whether r may scrape the metrics without a token:
// it comes from a ScrapeNets network or carries the ScrapeToken.
func (a *Authenticator) scrapeAllowed(r *http.Request) bool {
	if a.cfg.ScrapeToken != "" {
		raw := bearer(strings.TrimSpace(r.Header.Get("Authorization")))
		if raw != "" && subtle.ConstantTimeCompare([]byte(raw), []byte(a.cfg.ScrapeToken)) == 1 {
			return true
		}
	}
	if len(a.cfg.ScrapeNets) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, n := range a.cfg.ScrapeNets {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// Allows reports whether p's roles meet level (true without an
// authenticator: auth is off).
func (a *Authenticator) Allows(p Principal, level Level) bool {
	return a == nil || a.allowed(p.Roles, level)
}

// IsAdmin reports whether p holds the admin role.
func (a *Authenticator) IsAdmin(p Principal) bool { return a != nil && a.allowed(p.Roles, Admin) }

// allowed reports whether any of roles meets level.
func (a *Authenticator) allowed(roles []string, level Level) bool {
	has := func(names ...string) bool {
		for _, n := range names {
			if n != "" && slices.Contains(roles, n) {
				return true
			}
		}
		return false
	}
	c := a.cfg
	switch level {
	case Admin:
		return has(c.RoleAdmin)
	case Produce:
		return has(c.RoleAdmin, c.RoleReadWrite, c.RoleWriteOnly)
	case ReadWrite:
		return has(c.RoleAdmin, c.RoleReadWrite)
	case ReadOnly:
		return has(c.RoleAdmin, c.RoleReadWrite, c.RoleReadOnly)
	case Public:
		return true
	}
	return false
}

// verify checks the signature and the claims.
func (a *Authenticator) verify(raw string) (Principal, *Error) {
	opts := []jwt.ParserOption{jwt.WithLeeway(a.cfg.ClockSkew), jwt.WithTimeFunc(a.clock.Now), jwt.WithIssuedAt()}
	if a.cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(a.cfg.Issuer))
	}
	if a.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(a.cfg.Audience))
	}
	var keyErr *Error
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		k, e := a.key(t)
		if e != nil {
			keyErr = e
			return nil, e
		}
		return k, nil
	}, opts...)
	if keyErr != nil {
		return Principal{}, keyErr
	}
	if err != nil {
		return Principal{}, claimError(err)
	}
	p := Principal{Roles: a.roles(claims), Verified: true}
	p.Sub, _ = claims["sub"].(string)
	if a.cfg.TenantClaim != "" {
		if v, ok := claims[a.cfg.TenantClaim]; ok {
			t, isString := v.(string)
			if !isString || t == "" {
				return Principal{}, &Error{http.StatusForbidden, fmt.Sprintf("the token's %s claim is not a tenant id", a.cfg.TenantClaim)}
			}
			p.Tenant = t
		}
	}
	return p, nil
}

// claimError maps a parse failure to Queen's 401 messages.
func claimError(err error) *Error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return unauthorized("Token decode error: %v", err)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return unauthorized("Invalid token signature")
	case errors.Is(err, jwt.ErrTokenExpired):
		return unauthorized("Token has expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return unauthorized("Token not yet valid")
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return unauthorized("Token issued in the future")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return unauthorized("Invalid token issuer")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return unauthorized("Invalid token audience")
	}
	return unauthorized("Invalid token: %v", err)
}

// key picks the verification key for a token's algorithm and kid.
func (a *Authenticator) key(t *jwt.Token) (any, *Error) {
	alg, _ := t.Header["alg"].(string)
	fam := family(alg)
	if fam == "" || fam == "auto" {
		return nil, unauthorized("Unsupported algorithm: %s", alg)
	}
	if cf := family(a.cfg.Algorithm); cf != "auto" && cf != fam {
		return nil, unauthorized("Token uses %s, expected %s", alg, a.cfg.Algorithm)
	}
	switch fam {
	case "HS":
		if a.cfg.Secret == "" {
			return nil, &Error{http.StatusInternalServerError, "HS256 secret not configured"}
		}
		return []byte(a.cfg.Secret), nil
	case "RS":
		if a.rsaKey != nil {
			return a.rsaKey, nil
		}
	case "EdDSA":
		if a.edKey != nil {
			return a.edKey, nil
		}
	}
	if a.jwks == nil {
		return nil, &Error{http.StatusInternalServerError, "Invalid algorithm configuration"}
	}
	kid, _ := t.Header["kid"].(string)
	k, err := a.jwks.get(kid)
	if err != nil {
		if a.log != nil {
			a.log.Warn("jwt: key lookup failed", "kid", kid, "err", err)
		}
		return nil, err
	}
	switch k.(type) {
	case *rsa.PublicKey:
		if fam != "RS" {
			return nil, unauthorized("Token uses %s, but key %s is RSA", alg, kid)
		}
	case ed25519.PublicKey:
		if fam != "EdDSA" {
			return nil, unauthorized("Token uses %s, but key %s is Ed25519", alg, kid)
		}
	}
	return k, nil
}

// roles reads the string role claim and the array roles claim.
func (a *Authenticator) roles(c jwt.MapClaims) []string {
	var out []string
	if s, ok := c[a.cfg.RolesClaim].(string); ok && s != "" {
		out = append(out, s)
	}
	if arr, ok := c[a.cfg.RolesArrayClaim].([]any); ok {
		for _, v := range arr {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}
