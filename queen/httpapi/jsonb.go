package httpapi

// jsonbSafe reports the first thing in a valid JSON text that PostgreSQL's
// jsonb refuses (SQLSTATE 22P05): a \u0000 escape, or a \u escape of a
// lone UTF-16 surrogate. Refusing it at the edge, with a 400 naming the
// field, keeps it out of a combined statement and out of the spool, where
// it could only fail again at replay.
func jsonbSafe(raw []byte) (string, bool) {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // an escaped character, possibly a backslash
			continue
		}
		v, ok := hex4(raw, i+2)
		if !ok {
			return "", true // not valid JSON; the decoder has said so already
		}
		switch {
		case v == 0:
			return `\u0000 (jsonb cannot store a NUL character)`, false
		case v >= 0xDC00 && v <= 0xDFFF:
			return "a lone low surrogate escape", false
		case v >= 0xD800 && v <= 0xDBFF:
			// A high surrogate must be followed by a low one.
			if i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if lo, ok := hex4(raw, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
					continue
				}
			}
			return "a lone high surrogate escape", false
		}
		i += 5
	}
	return "", true
}

func hex4(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	var v rune
	for _, c := range raw[at : at+4] {
		v <<= 4
		switch {
		case c >= '0' && c <= '9':
			v |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			v |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			v |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return v, true
}
