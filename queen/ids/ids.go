// Package ids mints identifiers: UUIDv7 message ids and lease tokens.
//
// It is a seam: production draws randomness from crypto/rand and time from a
// Clock; the simulator passes a seeded source so a run is reproducible.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"io"
	"sync"

	"github.com/queen-go/queen/queen/clock"
)

// Source mints UUIDv7 strings. It is safe for concurrent use.
type Source struct {
	mu     sync.Mutex
	clock  clock.Clock
	rand   io.Reader
	lastMs int64
	seq    uint16
}

// NewSource returns a Source reading time from c and randomness from r.
// A nil r means crypto/rand.
func NewSource(c clock.Clock, r io.Reader) *Source {
	if r == nil {
		r = rand.Reader
	}
	return &Source{clock: c, rand: r}
}

// Jitter returns a number in [0, n) from the source's randomness, for
// back-off pauses (seeded, so the simulator replays them).
func (s *Source) Jitter(n int) int {
	if n <= 1 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var b [2]byte
	if _, err := io.ReadFull(s.rand, b[:]); err != nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b[:])) % n
}

// New returns a fresh UUIDv7 in canonical text form. Within one millisecond
// the 12-bit rand_a field counts up so ids from one Source sort by creation.
func (s *Source) New() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b [16]byte
	ms := s.clock.Now().UnixMilli()
	if ms <= s.lastMs {
		ms = s.lastMs
		s.seq++
		if s.seq > 0x0fff {
			ms++
			s.seq = 0
		}
	} else {
		s.seq = 0
	}
	s.lastMs = ms
	if _, err := io.ReadFull(s.rand, b[8:]); err != nil {
		panic("ids: random source failed: " + err.Error())
	}
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], uint64(ms)<<16)
	copy(b[0:6], t[0:6])
	b[6] = 0x70 | byte(s.seq>>8)
	b[7] = byte(s.seq)
	b[8] = (b[8] & 0x3f) | 0x80
	return Format(b)
}

// Format renders 16 bytes as a canonical UUID string.
func Format(b [16]byte) string {
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

// Valid reports whether s is a UUID in canonical 8-4-4-4-12 hex form.
func Valid(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}
