// Package crypt seals message payloads at rest with AES-256-GCM, in Queen's
// envelope: {"encrypted": base64 ciphertext, "iv": base64 16-byte IV,
// "authTag": base64 16-byte tag}. The key is QUEEN_ENCRYPTION_KEY, 64 hex
// characters; QUEEN_ENCRYPTION_KEYS_PREVIOUS lists keys that still open what
// they sealed (key rotation) but never seal.
package crypt

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

const (
	ivSize  = 16
	tagSize = 16
)

// Cipher seals with one key and opens with it or any previous key. It is
// safe for concurrent use.
type Cipher struct{ aeads []cipher.AEAD } // [0] seals

// ErrNoKeyOpens is what Open answers for an envelope that none of the
// configured keys opens: it will never open on this broker.
var ErrNoKeyOpens = errors.New("crypt: the envelope opens with none of the configured keys (QUEEN_ENCRYPTION_KEY, QUEEN_ENCRYPTION_KEYS_PREVIOUS)")

// ErrMalformed is what Open answers for a payload that is not an envelope.
var ErrMalformed = errors.New("crypt: malformed envelope")

// New takes the sealing key and any previous keys, each 64 hex characters.
func New(hexKey string, previous ...string) (*Cipher, error) {
	c := &Cipher{}
	for i, k := range append([]string{hexKey}, previous...) {
		aead, err := newAEAD(k)
		if err != nil {
			if i > 0 {
				return nil, fmt.Errorf("previous key %d: %w", i, err)
			}
			return nil, err
		}
		c.aeads = append(c.aeads, aead)
	}
	return c, nil
}

func newAEAD(hexKey string) (cipher.AEAD, error) {
	key, err := hex.DecodeString(hexKey)
	if err != nil || len(key) != 32 {
		return nil, errors.New("want 64 hex characters (a 256-bit key)")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCMWithNonceSize(block, ivSize)
}

type envelope struct {
	Encrypted string `json:"encrypted"`
	IV        string `json:"iv"`
	AuthTag   string `json:"authTag"`
}

// Seal encrypts plain (a JSON text) into an envelope.
func (c *Cipher) Seal(plain []byte) (json.RawMessage, error) {
	iv := make([]byte, ivSize)
	if _, err := rand.Read(iv); err != nil {
		return nil, err
	}
	out := c.aeads[0].Seal(nil, iv, plain, nil)
	ct, tag := out[:len(out)-tagSize], out[len(out)-tagSize:]
	b64 := base64.StdEncoding
	return json.Marshal(envelope{Encrypted: b64.EncodeToString(ct), IV: b64.EncodeToString(iv), AuthTag: b64.EncodeToString(tag)})
}

// Open decrypts an envelope back to the JSON text sealed in it.
func (c *Cipher) Open(sealed []byte) (json.RawMessage, error) {
	var e envelope
	if err := json.Unmarshal(sealed, &e); err != nil {
		return nil, fmt.Errorf("%w: not an envelope: %v", ErrMalformed, err)
	}
	b64 := base64.StdEncoding
	ct, err1 := b64.DecodeString(e.Encrypted)
	iv, err2 := b64.DecodeString(e.IV)
	tag, err3 := b64.DecodeString(e.AuthTag)
	if err := errors.Join(err1, err2, err3); err != nil || len(iv) != ivSize || len(tag) != tagSize {
		return nil, ErrMalformed
	}
	sealed = append(ct, tag...)
	for _, a := range c.aeads {
		if plain, err := a.Open(nil, iv, sealed, nil); err == nil {
			return plain, nil
		}
	}
	return nil, ErrNoKeyOpens
}
