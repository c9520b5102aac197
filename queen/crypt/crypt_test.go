package crypt

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	c, err := New(strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := c.Seal([]byte(`{"card":"4111"}`))
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]string
	if json.Unmarshal(sealed, &env) != nil || env["encrypted"] == "" || env["iv"] == "" || env["authTag"] == "" ||
		bytes.Contains(sealed, []byte("4111")) {
		t.Fatalf("envelope: %s", sealed)
	}
	plain, err := c.Open(sealed)
	if err != nil || string(plain) != `{"card":"4111"}` {
		t.Fatalf("open: %s %v", plain, err)
	}
	other, _ := New(strings.Repeat("cd", 32))
	if _, err := other.Open(sealed); err == nil {
		t.Fatal("opened with another key")
	}
	env["encrypted"] = env["authTag"]
	tampered, _ := json.Marshal(env)
	if _, err := c.Open(tampered); err == nil {
		t.Fatal("a tampered envelope opened")
	}
	for _, bad := range []string{"", "xyz", strings.Repeat("ab", 16)} {
		if _, err := New(bad); err == nil {
			t.Fatalf("key %q accepted", bad)
		}
	}
}

// TestPreviousKeysOpenButNeverSeal: after a rotation the old key still opens
// what it sealed, new seals use only the new key, and an envelope no key
// opens is ErrNoKeyOpens.
func TestPreviousKeysOpenButNeverSeal(t *testing.T) {
	oldKey, newKey := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	old, _ := New(oldKey)
	ring, err := New(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	sealedOld, _ := old.Seal([]byte(`{"a":1}`))
	if plain, err := ring.Open(sealedOld); err != nil || string(plain) != `{"a":1}` {
		t.Fatalf("the previous key does not open: %s %v", plain, err)
	}
	sealedNew, _ := ring.Seal([]byte(`{"b":2}`))
	if _, err := old.Open(sealedNew); !errors.Is(err, ErrNoKeyOpens) {
		t.Fatalf("a new seal opened with the old key alone (%v): it was sealed with the previous key", err)
	}
	if _, err := New(newKey, "short"); err == nil {
		t.Fatal("a malformed previous key was taken")
	}
}

// TestPayloadCarriesWhetherItIsSealed: a payload is sealed at most once and
// opened at most once, whatever path hands it on: sealing a sealed payload
// and opening a plain one change nothing.
func TestPayloadCarriesWhetherItIsSealed(t *testing.T) {
	c, _ := New(strings.Repeat("c3", 32))
	plain := Plain([]byte(`{"a":1}`))
	sealed, err := c.SealPayload(plain)
	if err != nil || !sealed.Sealed() || bytes.Contains(sealed.Raw(), []byte(`"a"`)) {
		t.Fatalf("seal: %v %s", err, sealed.Raw())
	}
	again, _ := c.SealPayload(sealed)
	if !bytes.Equal(again.Raw(), sealed.Raw()) {
		t.Fatal("a sealed payload was sealed a second time")
	}
	opened, err := c.OpenPayload(again)
	if err != nil || opened.Sealed() || string(opened.Raw()) != `{"a":1}` {
		t.Fatalf("open: %v %s", err, opened.Raw())
	}
	if same, _ := c.OpenPayload(opened); string(same.Raw()) != `{"a":1}` || same.Sealed() {
		t.Fatal("opening a plain payload changed it")
	}
	if empty, _ := c.SealPayload(Plain(nil)); !empty.Sealed() {
		t.Fatal("an empty payload was not sealed (it is stored as JSON null)")
	}
}

// TestRevealOpensWhatAKeyOpensAndShowsTheRestAsStored: a reader's view of
// a stored payload is its plaintext when a configured key opens it, the
// stored text otherwise (no cipher, a key that does not open it, a plain
// payload), and null for none.
func TestRevealOpensWhatAKeyOpensAndShowsTheRestAsStored(t *testing.T) {
	c, err := New(strings.Repeat("11", 32))
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(strings.Repeat("22", 32))
	if err != nil {
		t.Fatal(err)
	}
	plain := json.RawMessage(`{"pin":"1357"}`)
	sealed, err := c.SealPayload(Plain(plain))
	if err != nil {
		t.Fatal(err)
	}
	var none *Cipher
	for _, tc := range []struct {
		name string
		c    *Cipher
		p    Payload
		want string
	}{
		{"opened", c, sealed, string(plain)},
		{"no cipher", none, sealed, string(sealed.Raw())},
		{"no key opens it", other, sealed, string(sealed.Raw())},
		{"plain", c, Stored(plain, false), string(plain)},
		{"empty", c, Stored(nil, false), "null"},
		{"empty without a cipher", none, Stored(nil, true), "null"},
	} {
		if got := string(tc.c.Reveal(tc.p)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
