package httpapi

import (
	"encoding/json"
	"unicode/utf8"
)

// A hand-written decoder for the push body, the hottest body there is.
// encoding/json reaches a struct's fields by reflection, matches keys
// without regard to case and unescapes every string; decodePushFast reads
// the common body (an object whose items are objects of plain strings and
// a payload of any JSON) in one pass with none of that, and gives up on
// anything else: an escape or invalid UTF-8 in a string, a key that is not
// one of the body's names but matches one ignoring case, a field of the
// wrong type, nesting deeper than fastMaxDepth, trailing data. The caller
// then decodes with encoding/json, which answers the same for every body
// this one takes (TestPushDecodersAgree, FuzzPushDecodersAgree).

// fastMaxDepth is the deepest payload the fast decoder walks; a deeper one
// goes to encoding/json (and then to the limits, which refuse it).
const fastMaxDepth = 64

// pushScan walks one body.
type pushScan struct {
	b []byte
	i int
	// max > 0 stops the items array at max+1 items (over): the body is
	// refused for its count, so the rest need not be decoded.
	max  int
	over bool
}

// decodePushFast decodes body into the items' wire structs, or reports
// ok=false, having decided nothing, for a body it does not take.
func decodePushFast(body []byte) (items []pushItemWire, ok bool) {
	items, ok, _ = decodePushFastMax(body, 0)
	return items, ok
}

// decodePushFastMax is decodePushFast that gives up at the (max+1)th item
// with over set, whatever the rest of the body holds (max 0: no bound).
func decodePushFastMax(body []byte, max int) (items []pushItemWire, ok, over bool) {
	s := &pushScan{b: body, max: max}
	items, ok = s.body()
	return items, ok, s.over
}

// body reads the push body.
func (s *pushScan) body() (items []pushItemWire, ok bool) {
	found := false
	if !s.open() {
		return nil, false
	}
	for first := true; ; first = false {
		key, more, ok := s.key(first)
		switch {
		case !ok:
			return nil, false
		case !more:
			s.space()
			return items, found && s.i == len(s.b)
		case string(key) == "items":
			if items, found = s.items(); !found {
				return nil, false
			}
		case !s.foreignKey(key, "items") || !s.skip(0):
			return nil, false
		}
	}
}

// items reads the items array.
func (s *pushScan) items() ([]pushItemWire, bool) {
	s.space()
	if !s.take('[') {
		return nil, false
	}
	items := make([]pushItemWire, 0, 8)
	s.space()
	if s.take(']') {
		return items, true
	}
	for {
		var it pushItemWire
		if !s.item(&it) {
			return nil, false
		}
		items = append(items, it)
		if s.max > 0 && len(items) > s.max {
			s.over = true
			return items, false
		}
		s.space()
		if s.take(']') {
			return items, true
		}
		if !s.take(',') {
			return nil, false
		}
	}
}

// item reads one item object into it.
func (s *pushScan) item(it *pushItemWire) bool {
	if !s.open() {
		return false
	}
	for first := true; ; first = false {
		key, more, ok := s.key(first)
		if !ok || !more {
			return ok
		}
		var dst *wireString
		switch string(key) {
		case "queue":
			dst = &it.Queue
		case "partition":
			dst = &it.Partition
		case "transactionId":
			dst = &it.TransactionID
		case "traceId":
			dst = &it.TraceID
		case "payload", "data":
			if !s.raw(it, string(key)) {
				return false
			}
			continue
		default:
			if !s.foreignKey(key, "queue", "partition", "transactionId", "traceId", "payload", "data") || !s.skip(0) {
				return false
			}
			continue
		}
		if !s.wireString(dst) {
			return false
		}
	}
}

// raw reads the payload (or data) of an item: any JSON, kept as sent.
func (s *pushScan) raw(it *pushItemWire, key string) bool {
	s.space()
	start := s.i
	if !s.skip(0) {
		return false
	}
	raw := json.RawMessage(append([]byte(nil), s.b[start:s.i]...))
	if key == "payload" {
		it.Payload = raw
	} else {
		it.Data = raw
	}
	return true
}

// wireString reads a string field's value, a string or null (which
// replaces an earlier value, as wireString.UnmarshalJSON does).
func (s *pushScan) wireString(dst *wireString) bool {
	s.space()
	if s.literal("null") {
		*dst = ""
		return true
	}
	v, ok := s.str()
	if !ok {
		return false
	}
	*dst = wireString(v)
	return true
}

// foreignKey reports whether key is none of names even ignoring case
// (encoding/json would take it for the name).
func (s *pushScan) foreignKey(key []byte, names ...string) bool {
	for _, n := range names {
		if len(n) == len(key) && equalFoldASCII(n, key) {
			return false
		}
	}
	return true
}

// equalFoldASCII compares ASCII letters without case; any other byte
// must be equal (a key with a non-ASCII byte that folds to a name, as
// encoding/json folds the Kelvin sign, makes the caller give up: see str).
func equalFoldASCII(a string, b []byte) bool {
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// open reads the '{' of an object.
func (s *pushScan) open() bool {
	s.space()
	return s.take('{')
}

// key reads the next key of an object and its ':', the ',' before it
// unless first; more is false at the object's '}'.
func (s *pushScan) key(first bool) (key []byte, more, ok bool) {
	s.space()
	if s.take('}') {
		return nil, false, true
	}
	if !first && !s.take(',') {
		return nil, false, false
	}
	s.space()
	if key, ok = s.str(); !ok {
		return nil, false, false
	}
	s.space()
	return key, true, s.take(':')
}

// str reads a string with no escape, of valid UTF-8 and nothing that
// encoding/json would fold into an ASCII name (the Kelvin sign and the
// long s): anything else is left to encoding/json.
func (s *pushScan) str() ([]byte, bool) {
	if !s.take('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError || r == '\u212a' || r == '\u017f' {
				return nil, false
			}
			s.i += size
		}
	}
	return nil, false
}

// skip reads any JSON value (validating it) at depth.
func (s *pushScan) skip(depth int) bool {
	if depth > fastMaxDepth {
		return false
	}
	s.space()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		s.i++
		for first := true; ; first = false {
			_, more, ok := s.key(first)
			if !ok || !more {
				return ok
			}
			if !s.skip(depth + 1) {
				return false
			}
		}
	case c == '[':
		s.i++
		s.space()
		if s.take(']') {
			return true
		}
		for {
			if !s.skip(depth + 1) {
				return false
			}
			s.space()
			if s.take(']') {
				return true
			}
			if !s.take(',') {
				return false
			}
		}
	case c == '"':
		_, ok := s.str()
		return ok
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		return s.number()
	}
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *pushScan) number() bool {
	s.take('-')
	switch {
	case s.take('0'):
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.take('.') && !s.digits() {
		return false
	}
	if s.take('e') || s.take('E') {
		if !s.take('+') {
			s.take('-')
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits reads one or more digits.
func (s *pushScan) digits() bool {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *pushScan) literal(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

func (s *pushScan) take(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *pushScan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}
