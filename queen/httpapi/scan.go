package httpapi

import "unicode/utf8"

// The JSON tokens of the hot bodies' reader (decode.go): every token is
// checked as encoding/json checks it, so a body this reads whole is JSON
// to encoding/json and one it stops on is not.

// enter counts an object or array just opened.
func (s *scan) enter() bool {
	s.depth++
	return s.depth <= maxDepth
}

// key reads the next key of an object and its ':', the ',' before it
// unless first; more is false at the object's '}'. key is as str returns
// it.
func (s *scan) key(first bool) (key []byte, plain, more, ok bool) {
	s.space()
	if s.take('}') {
		s.depth--
		return nil, false, false, true
	}
	if !first && !s.take(',') {
		return nil, false, false, false
	}
	s.space()
	if key, plain, ok = s.str(); !ok {
		return nil, false, false, false
	}
	s.space()
	return key, plain, true, s.take(':')
}

// str reads a string. plain is true for one with no escape and of valid
// UTF-8, whose text is then key (the bytes between the quotes); else key
// is the whole token, for unquote.
func (s *scan) str() (key []byte, plain, ok bool) {
	if !s.take('"') {
		return nil, false, false
	}
	b, start := s.b, s.i
	plain = true
	for i := start; i < len(b); {
		// The index is a local: the loop runs per byte of every string.
		switch c := b[i]; {
		case c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\':
			i++
		case c == '"':
			s.i = i + 1
			if plain {
				return b[start:i], true, true
			}
			return b[start-1 : i+1], false, true
		case c < 0x20:
			return nil, false, false
		case c == '\\':
			if s.i = i; !s.escape() {
				return nil, false, false
			}
			i, plain, s.uncommon = s.i, false, true
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError || r == '\u212a' || r == '\u017f' {
				// The Kelvin sign and the long s fold to ASCII letters.
				s.uncommon = true
				plain = plain && size > 1
			}
			i += size
		}
	}
	return nil, false, false
}

// escape reads one escape sequence of a string.
func (s *scan) escape() bool {
	s.i++
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i++
		return true
	case 'u':
		s.i++
		for range 4 {
			if s.i >= len(s.b) || !isHex(s.b[s.i]) {
				return false
			}
			s.i++
		}
		return true
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skip reads any JSON value, rel levels below the field that holds it.
func (s *scan) skip(rel int) bool {
	if rel > commonDepth {
		s.uncommon = true
	}
	s.space()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		s.i++
		if !s.enter() {
			return false
		}
		for first := true; ; first = false {
			_, _, more, ok := s.key(first)
			if !ok || !more {
				return ok
			}
			if !s.skip(rel + 1) {
				return false
			}
		}
	case c == '[':
		return s.skipArray(rel)
	case c == '"':
		_, _, ok := s.str()
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

// skipArray reads an array, rel levels below the field that holds it.
func (s *scan) skipArray(rel int) bool {
	s.i++
	if !s.enter() {
		return false
	}
	s.space()
	if s.take(']') {
		s.depth--
		return true
	}
	for {
		if !s.skip(rel + 1) {
			return false
		}
		if done, ok := s.nextElement(); done || !ok {
			return done
		}
	}
}

// nextElement reads what follows an array's element: the array's end
// (done) or a comma (ok); anything else is neither.
func (s *scan) nextElement() (done, ok bool) {
	s.space()
	if s.take(']') {
		s.depth--
		return true, true
	}
	return false, s.take(',')
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scan) number() bool {
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
func (s *scan) digits() bool {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *scan) literal(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

func (s *scan) take(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// space skips whitespace; inlined where there is none, as in most bodies.
func (s *scan) space() {
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return
	}
	s.spaces()
}

func (s *scan) spaces() {
	i := s.i
	for i < len(s.b) {
		switch s.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			s.i = i
			return
		}
	}
	s.i = i
}
