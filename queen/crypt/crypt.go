// Package crypt seals message payloads at rest with AES-256-GCM, in Queen's
// envelope: {"encrypted": base64 ciphertext, "iv": base64 16-byte IV,
// "authTag": base64 16-byte tag}. The key is QUEEN_ENCRYPTION_KEY, 64 hex
// characters.
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

// Cipher seals and opens payloads. It is safe for concurrent use.
type Cipher struct{ aead cipher.AEAD }

// New takes a 64-hex-character key.
func New(hexKey string) (*Cipher, error) {
	key, err := hex.DecodeString(hexKey)
	if err != nil || len(key) != 32 {
		return nil, errors.New("want 64 hex characters (a 256-bit key)")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCMWithNonceSize(block, ivSize)
	if err != nil {
		return nil, err
	}
	return &Cipher{aead: aead}, nil
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
	out := c.aead.Seal(nil, iv, plain, nil)
	ct, tag := out[:len(out)-tagSize], out[len(out)-tagSize:]
	b64 := base64.StdEncoding
	return json.Marshal(envelope{Encrypted: b64.EncodeToString(ct), IV: b64.EncodeToString(iv), AuthTag: b64.EncodeToString(tag)})
}

// Open decrypts an envelope back to the JSON text sealed in it.
func (c *Cipher) Open(sealed []byte) (json.RawMessage, error) {
	var e envelope
	if err := json.Unmarshal(sealed, &e); err != nil {
		return nil, fmt.Errorf("crypt: not an envelope: %w", err)
	}
	b64 := base64.StdEncoding
	ct, err1 := b64.DecodeString(e.Encrypted)
	iv, err2 := b64.DecodeString(e.IV)
	tag, err3 := b64.DecodeString(e.AuthTag)
	if err := errors.Join(err1, err2, err3); err != nil || len(iv) != ivSize || len(tag) != tagSize {
		return nil, errors.New("crypt: malformed envelope")
	}
	plain, err := c.aead.Open(nil, iv, append(ct, tag...), nil)
	if err != nil {
		return nil, errors.New("crypt: the envelope does not open with this key")
	}
	return plain, nil
}
