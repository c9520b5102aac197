package crypt

import "encoding/json"

// Payload is a message body as it travels between the edge, the spool and
// the database: its JSON text and whether that text is an envelope, as one
// value. No path can take an envelope for plaintext, or seal one twice:
// SealPayload and OpenPayload are the only ways across.
type Payload struct {
	raw    json.RawMessage
	sealed bool
}

// Plain is a client's payload, in the clear; nil stays empty (stored as
// JSON null).
func Plain(raw json.RawMessage) Payload { return Payload{raw: raw} }

// Stored is a payload as read back from a row or a spool record, sealed
// when its flag says so.
func Stored(raw []byte, sealed bool) Payload { return Payload{raw: raw, sealed: sealed} }

// Sealed reports whether the payload is an envelope.
func (p Payload) Sealed() bool { return p.sealed }

// Raw is the payload as stored: the envelope when sealed; nil when empty.
func (p Payload) Raw() json.RawMessage { return p.raw }

// Empty reports a payload the client did not send.
func (p Payload) Empty() bool { return len(p.raw) == 0 }

// SealPayload seals a plain payload (an empty one as JSON null); a sealed
// one is returned as it is.
func (c *Cipher) SealPayload(p Payload) (Payload, error) {
	if p.sealed {
		return p, nil
	}
	raw := p.raw
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	sealed, err := c.Seal(raw)
	if err != nil {
		return p, err
	}
	return Payload{raw: sealed, sealed: true}, nil
}

// OpenPayload opens a sealed payload with any configured key; a plain one
// is returned as it is. ErrNoKeyOpens: no configured key opens it.
func (c *Cipher) OpenPayload(p Payload) (Payload, error) {
	if !p.sealed {
		return p, nil
	}
	plain, err := c.Open(p.raw)
	if err != nil {
		return p, err
	}
	return Payload{raw: plain}, nil
}

// Reveal is what a reader hands a client of a stored payload: the
// plaintext of a sealed one when a configured key opens it, else the
// payload as stored (an envelope no key opens stays readable as one, never
// an error: a retired key must not fail a listing); an empty one is JSON
// null. A nil Cipher (no QUEEN_ENCRYPTION_KEY) opens nothing.
func (c *Cipher) Reveal(p Payload) json.RawMessage {
	if p.raw == nil {
		return json.RawMessage("null")
	}
	if c == nil {
		return p.raw
	}
	plain, err := c.OpenPayload(p)
	if err != nil {
		return p.raw
	}
	return plain.raw
}
