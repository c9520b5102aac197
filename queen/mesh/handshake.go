package mesh

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
)

// The handshake is a mutual challenge-response under the shared secret,
// three frames long, before anything else crosses a link:
//
//	dialer   -> acceptor  HELLO     {server_id, nonce}                 fresh nonce nD
//	acceptor -> dialer    CHALLENGE {server_id, nonce, mac}            fresh nonce nA, mac over "challenge"
//	dialer   -> acceptor  PROOF     {mac}                              mac over "proof"
//
// Each mac is HMAC-SHA256(secret, label, dialer id, acceptor id, nD, nA),
// every field length-prefixed. The acceptor's nonce is fresh per
// connection, so a recorded HELLO and PROOF are worthless on another; the
// labels differ, so neither side's mac can be reflected as the other's; the
// ids are inside, so a proof binds both ends. The session key is the same
// HMAC under the label "session": every frame after the PROOF carries a
// sequence number and an HMAC under it (sealFrame), so a recorded frame
// cannot be replayed, reordered, or spliced into another connection.
//
// With no secret (open mode) the same exchange runs under an empty key:
// it proves nothing, and says so in the startup log.

// Handshake frame types (Queen's HELLO number, and two of our own).
const (
	Challenge Type = 6 // acceptor's answer to a HELLO
	Proof     Type = 7 // dialer's answer to the CHALLENGE
)

// PreAuthMaxFrame bounds every frame before the PROOF is checked: a peer
// that has proven nothing makes the broker allocate no more than this.
const PreAuthMaxFrame = 512

// sealSize is what sealFrame adds to a frame: u64 sequence and the MAC.
const sealSize = 8 + sha256.Size

var (
	errBadHello = errors.New("mesh: bad HELLO")
	errBadMAC   = errors.New("mesh: handshake MAC does not match (wrong QUEEN_SYNC_SECRET?)")
	errBadSeal  = errors.New("mesh: frame MAC does not match")
	errBadSeq   = errors.New("mesh: frame out of sequence")
)

type hello struct {
	ServerID string `json:"server_id"`
	Nonce    string `json:"nonce"`
}

type challenge struct {
	ServerID string `json:"server_id"`
	Nonce    string `json:"nonce"`
	MAC      string `json:"mac"`
}

type proof struct {
	MAC string `json:"mac"`
}

// transcript is what every mac of one connection is computed over.
type transcript struct {
	dialer, acceptor, dialerNonce, acceptorNonce string
}

// mac is HMAC-SHA256(secret) over label and the transcript, each field
// length-prefixed so that no two transcripts encode alike.
func (t transcript) mac(secret []byte, label string) []byte {
	h := hmac.New(sha256.New, secret)
	for _, f := range []string{label, t.dialer, t.acceptor, t.dialerNonce, t.acceptorNonce} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return h.Sum(nil)
}

func nonce() (string, error) {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(n[:]), nil
}

// session seals (dialer) or opens (acceptor) the frames of one
// authenticated connection.
type session struct {
	mac hash.Hash
	seq uint64 // the last sequence number sealed or opened
}

func newSession(key []byte) *session { return &session{mac: hmac.New(sha256.New, key)} }

func (s *session) sum(seq uint64, body []byte) []byte {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], seq)
	s.mac.Reset()
	s.mac.Write(n[:])
	s.mac.Write(body)
	return s.mac.Sum(nil)
}

// seal turns an encoded frame (encode) into the sealed frame on the wire:
// the same type and payload, then the next sequence number and the MAC of
// both, the length prefix counting them.
func (s *session) seal(frame []byte) []byte {
	s.seq++
	body := frame[4:]
	out := make([]byte, 4, len(frame)+sealSize)
	binary.BigEndian.PutUint32(out, uint32(len(body)+sealSize))
	out = append(out, body...)
	out = binary.BigEndian.AppendUint64(out, s.seq)
	return append(out, s.sum(s.seq, body)...)
}

// open checks a sealed frame's MAC and sequence number and returns the
// frame inside.
func (s *session) open(f Frame) (Frame, error) {
	if len(f.Payload) < sealSize {
		return Frame{}, errBadSeal
	}
	n := len(f.Payload) - sealSize
	body := append([]byte{byte(f.Type)}, f.Payload[:n]...)
	seq := binary.BigEndian.Uint64(f.Payload[n : n+8])
	if !hmac.Equal(f.Payload[n+8:], s.sum(seq, body)) {
		return Frame{}, errBadSeal
	}
	if seq != s.seq+1 {
		return Frame{}, fmt.Errorf("%w: got %d after %d", errBadSeq, seq, s.seq)
	}
	s.seq = seq
	return Frame{Type: f.Type, Payload: f.Payload[:n]}, nil
}

// writeJSON writes one handshake frame.
func writeHandshake(w io.Writer, t Type, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(Frame{Type: t, Payload: body}.encode())
	return err
}

// readHandshake reads one handshake frame of type t into v, at most
// PreAuthMaxFrame long.
func readHandshake(r io.Reader, t Type, v any) error {
	f, err := readFrame(r, PreAuthMaxFrame)
	if err != nil {
		return err
	}
	if f.Type != t || json.Unmarshal(f.Payload, v) != nil {
		return errBadHello
	}
	return nil
}

// dialHandshake runs the dialer's side on conn and returns the session
// that seals what it sends next, and the acceptor's server id.
func dialHandshake(conn io.ReadWriter, id string, secret []byte) (*session, string, error) {
	nd, err := nonce()
	if err != nil {
		return nil, "", err
	}
	if err := writeHandshake(conn, Hello, hello{ServerID: id, Nonce: nd}); err != nil {
		return nil, "", err
	}
	var c challenge
	if err := readHandshake(conn, Challenge, &c); err != nil {
		return nil, "", err
	}
	if c.ServerID == "" || len(c.Nonce) != 32 {
		return nil, "", errBadHello
	}
	t := transcript{dialer: id, acceptor: c.ServerID, dialerNonce: nd, acceptorNonce: c.Nonce}
	if got, err := hex.DecodeString(c.MAC); err != nil || !hmac.Equal(got, t.mac(secret, "challenge")) {
		return nil, c.ServerID, errBadMAC
	}
	if err := writeHandshake(conn, Proof, proof{MAC: hex.EncodeToString(t.mac(secret, "proof"))}); err != nil {
		return nil, c.ServerID, err
	}
	return newSession(t.mac(secret, "session")), c.ServerID, nil
}

// acceptHandshake runs the acceptor's side on conn and returns the session
// that opens what the dialer sends next, and the dialer's server id.
func acceptHandshake(conn io.ReadWriter, id string, secret []byte) (*session, string, error) {
	var h hello
	if err := readHandshake(conn, Hello, &h); err != nil {
		return nil, "", err
	}
	if h.ServerID == "" || len(h.Nonce) != 32 {
		return nil, "", errBadHello
	}
	na, err := nonce()
	if err != nil {
		return nil, "", err
	}
	t := transcript{dialer: h.ServerID, acceptor: id, dialerNonce: h.Nonce, acceptorNonce: na}
	if err := writeHandshake(conn, Challenge, challenge{ServerID: id, Nonce: na, MAC: hex.EncodeToString(t.mac(secret, "challenge"))}); err != nil {
		return nil, h.ServerID, err
	}
	var p proof
	if err := readHandshake(conn, Proof, &p); err != nil {
		return nil, h.ServerID, err
	}
	if got, err := hex.DecodeString(p.MAC); err != nil || !hmac.Equal(got, t.mac(secret, "proof")) {
		return nil, h.ServerID, errBadMAC
	}
	return newSession(t.mac(secret, "session")), h.ServerID, nil
}
