package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"sync"
	"time"

	"github.com/queen-go/queen/queen/clock"
)

// jwks caches the keys of a JWKS URL by kid. It fetches on first use, again
// when the cache is older than the refresh interval, and again (at most
// every unknownKidRefetch) when a token names a kid it does not know.
//
// A fetch runs outside the lock, one at a time (single-flight): requests
// whose key is cached never wait for it, and one that does wait (the first
// use, or an unknown kid) waits at most waitBound. A refresh that fails
// keeps the previous key set serving. A kid still unknown after a fetch is
// remembered (negative cache) for unknownKidRefetch, so tokens naming
// random kids cost a map lookup, not a fetch each.
type jwks struct {
	url     string
	refresh time.Duration
	client  *http.Client
	clock   clock.Clock
	log     *slog.Logger

	mu       sync.Mutex
	keys     map[string]any
	fetched  time.Time     // when the last fetch began
	inflight chan struct{} // closed when the running fetch ends; nil: none
	unknown  map[string]time.Time
}

const (
	// unknownKidRefetch bounds refetches caused by unknown kids, and how
	// long a kid a fetch did not find is answered unknown at once.
	unknownKidRefetch = 5 * time.Second
	// waitBound is the longest a request waits on a fetch.
	waitBound = time.Second
	// maxUnknownKids bounds the negative cache.
	maxUnknownKids = 4096
)

func newJWKS(url string, refresh, timeout time.Duration, c clock.Clock, log *slog.Logger) *jwks {
	if refresh <= 0 {
		refresh = time.Hour
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &jwks{url: url, refresh: refresh, client: &http.Client{Timeout: timeout}, clock: c, log: log, unknown: map[string]time.Time{}}
}

// get returns the key for kid; an empty kid takes the only key there is.
func (j *jwks) get(kid string) (any, *Error) {
	j.mu.Lock()
	now := j.clock.Now()
	if j.keys != nil && now.Sub(j.fetched) > j.refresh {
		j.start(now) // refresh in the background; the old keys serve meanwhile
	}
	if k, ok := j.lookup(kid); ok {
		j.mu.Unlock()
		return k, nil
	}
	if until, ok := j.unknown[kid]; ok && now.Before(until) {
		j.mu.Unlock()
		return nil, unauthorized("Unknown key ID: %s", kid)
	}
	var done chan struct{}
	switch {
	case j.keys == nil || j.inflight != nil:
		done = j.start(now)
	case now.Sub(j.fetched) > unknownKidRefetch:
		done = j.start(now)
	}
	j.mu.Unlock()
	if done != nil {
		t := j.clock.NewTimer(waitBound)
		select {
		case <-done:
		case <-t.C():
		}
		t.Stop()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if k, ok := j.lookup(kid); ok {
		return k, nil
	}
	if j.keys == nil {
		return nil, &Error{http.StatusInternalServerError, "Failed to fetch JWKS"}
	}
	if kid != "" && j.inflight == nil {
		j.rememberUnknown(kid, j.clock.Now())
	}
	return nil, unauthorized("Unknown key ID: %s", kid)
}

// start begins a fetch unless one is running and returns the channel
// closed when it ends. Caller holds mu.
func (j *jwks) start(now time.Time) chan struct{} {
	if j.inflight != nil {
		return j.inflight
	}
	done := make(chan struct{})
	j.inflight, j.fetched = done, now
	go func() {
		keys, err := j.fetch()
		j.mu.Lock()
		if err == nil {
			j.keys = keys
			clear(j.unknown) // a kid unknown before may be in the new set
		} else if j.log != nil {
			j.log.Warn("jwt: JWKS fetch failed; the previous keys keep serving", "url", j.url, "have_keys", j.keys != nil, "err", err)
		}
		j.inflight = nil
		j.mu.Unlock()
		close(done)
	}()
	return done
}

// rememberUnknown answers kid unknown at once for unknownKidRefetch.
// Caller holds mu.
func (j *jwks) rememberUnknown(kid string, now time.Time) {
	if len(j.unknown) >= maxUnknownKids {
		for k, until := range j.unknown {
			if !now.Before(until) {
				delete(j.unknown, k)
			}
		}
		if len(j.unknown) >= maxUnknownKids {
			clear(j.unknown)
		}
	}
	j.unknown[kid] = now.Add(unknownKidRefetch)
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

// fetch reads the URL's keys, without the lock.
func (j *jwks) fetch() (map[string]any, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, j.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("JWKS %s answered %d", j.url, resp.StatusCode)
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("JWKS %s: %w", j.url, err)
	}
	keys := map[string]any{}
	for _, k := range set.Keys {
		if pk, ok := k.public(); ok {
			keys[k.Kid] = pk
		}
	}
	return keys, nil
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
