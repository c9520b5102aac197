package auth

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzToken: no Authorization header value panics the check, and none the
// fuzzer can make without the secret passes it.
func FuzzToken(f *testing.F) {
	good, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "a", "role": "admin",
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("s3cret"))
	f.Add("Bearer " + good)
	f.Add("bearer eyJhbGciOiJub25lIn0.e30.")
	f.Add("Bearer a.b.c")
	f.Add("")
	a, err := New(baseConfig(), nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string) {
		r := httptest.NewRequest("GET", "/api/v1/push", nil)
		r.Header["Authorization"] = []string{header}
		p, e := a.Check(r, ReadOnly)
		if e == nil && header != "Bearer "+good && !validHS(header, "s3cret") {
			t.Fatalf("accepted %q as %+v", header, p)
		}
	})
}

// validHS reports whether a header carries a token signed with secret (the
// fuzzer may rearrange a valid token's text without breaking it). As the
// check reads it (contract-admin.md section 8), surrounding space is
// trimmed, a case-insensitive "Bearer " prefix is stripped and a header
// without it is the token whole:
// testdata/fuzz/FuzzToken/09bfff823631ec0a is the good token without its
// prefix, which an oracle that always cut 7 characters took for a forgery.
func validHS(header, secret string) bool {
	raw := strings.TrimSpace(header)
	if len(raw) >= 7 && strings.EqualFold(raw[:7], "bearer ") {
		raw = strings.TrimSpace(raw[7:])
	}
	_, err := jwt.Parse(raw, func(*jwt.Token) (any, error) { return []byte(secret), nil })
	return err == nil
}
