package crypt

import (
	"bytes"
	"encoding/json"
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
