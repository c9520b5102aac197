package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"sync"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// jwks caches the keys of a JWKS URL by kid. It fetches on first use, again
// when the cache is older than the refresh interval, and again (at most
// every 5 s) when a token names a kid it does not know.
type jwks struct {
	url     string
	refresh time.Duration
	client  *http.Client
	clock   clock.Clock

	mu      sync.Mutex
	keys    map[string]any
	fetched time.Time
}

// unknownKidRefetch bounds refetches caused by unknown kids.
const unknownKidRefetch = 5 * time.Second

func newJWKS(url string, refresh, timeout time.Duration, c clock.Clock) *jwks {
	if refresh <= 0 {
		refresh = time.Hour
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &jwks{url: url, refresh: refresh, client: &http.Client{Timeout: timeout}, clock: c}
}

// get returns the key for kid; an empty kid takes the only key there is.
func (j *jwks) get(kid string) (any, *Error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := j.clock.Now()
	if j.keys == nil || now.Sub(j.fetched) > j.refresh {
		if err := j.fetch(now); err != nil && j.keys == nil {
			return nil, &Error{http.StatusInternalServerError, "Failed to fetch JWKS"}
		}
	}
	if k, ok := j.lookup(kid); ok {
		return k, nil
	}
	if kid != "" && now.Sub(j.fetched) > unknownKidRefetch {
		_ = j.fetch(now)
		if k, ok := j.lookup(kid); ok {
			return k, nil
		}
	}
	return nil, unauthorized("Unknown key ID: %s", kid)
}

func (j *jwks) lookup(kid string) (any, bool) {
	if kid == "" && len(j.keys) == 1 {
		for _, k := range j.keys {
			return k, true
		}
	}
	k, ok := j.keys[kid]
	return k, ok
}

type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
}

// fetch replaces the cache with the URL's keys; on failure the old keys
// stay. Caller holds mu.
func (j *jwks) fetch(now time.Time) error {
	j.fetched = now
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, j.url, nil)
	if err != nil {
		return err
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("JWKS %s answered %d", j.url, resp.StatusCode)
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		return fmt.Errorf("JWKS %s: %w", j.url, err)
	}
	keys := map[string]any{}
	for _, k := range set.Keys {
		if pk, ok := k.public(); ok {
			keys[k.Kid] = pk
		}
	}
	j.keys = keys
	return nil
}

// public decodes an RSA or Ed25519 key; other kinds are skipped.
func (k jwk) public() (any, bool) {
	b64 := base64.RawURLEncoding
	switch {
	case k.Kty == "RSA":
		n, err1 := b64.DecodeString(k.N)
		e, err2 := b64.DecodeString(k.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			return nil, false
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, true
	case k.Kty == "OKP" && k.Crv == "Ed25519":
		x, err := b64.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, false
		}
		return ed25519.PublicKey(x), true
	}
	return nil, false
}
