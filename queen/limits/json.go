package limits

import (
	"fmt"
	"unicode/utf8"

	"github.com/queen-go/queen/queen/canary"
)

// PostgreSQL's numeric, which jsonb stores every JSON number as: at most
// 131072 digits before the decimal point and 16383 after it, and an
// exponent its parser takes below INT_MAX/2.
const (
	maxNumericIntDigits = 131072
	maxNumericScale     = 16383
	maxNumericExponent  = 1<<30 - 1 // INT_MAX / 2
)

// MaxNumberExpansion bounds how much longer a document's numbers are as
// PostgreSQL prints them than as written. jsonb keeps a number as numeric
// and prints it in full: "1e131071" is 8 bytes written and 131,072 digits
// read back. Unbounded, a small push could store a message whose text
// exceeds PostgreSQL's 1 GB limit, and every pop of its partition would
// fail on it for good.
const MaxNumberExpansion = 1 << 20

// JSON refuses a valid JSON text that jsonb would not store: invalid UTF-8
// (SQLSTATE 22021), a \u0000 escape or a lone UTF-16 surrogate escape
// (22P05), or a number outside numeric's range (22003); and one whose
// numbers, printed, would be more than MaxNumberExpansion bytes longer than
// written. The decoder has already checked the syntax; name is the field
// errors say.
func JSON(name string, raw []byte) error {
	if canary.On("limits-off") {
		return nil
	}
	if !utf8.Valid(raw) {
		return &Error{name, "is not valid UTF-8"}
	}
	grown := 0
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			end, why := scanString(raw, i+1)
			if why != "" {
				return &Error{name, "contains " + why}
			}
			i = end
		case c == '-' || '0' <= c && c <= '9':
			end := scanNumber(raw, i)
			printed, why := numericRange(raw[i:end])
			if why != "" {
				return &Error{name, fmt.Sprintf("holds the number %s, which %s", clip(raw[i:end]), why)}
			}
			if grown += printed - (end - i); grown > MaxNumberExpansion {
				return &Error{name, fmt.Sprintf("holds numbers that PostgreSQL prints more than %d bytes longer than written (the number %s is one)", MaxNumberExpansion, clip(raw[i:end]))}
			}
			i = end - 1
		}
	}
	return nil
}

// scanString reads a string body from at (just past its quote) and returns
// the index of its closing quote, or why jsonb refuses it.
func scanString(raw []byte, at int) (int, string) {
	for i := at; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			return i, ""
		case '\\':
			if i+1 >= len(raw) {
				return len(raw), ""
			}
			if raw[i+1] != 'u' {
				i++ // an escaped character, possibly a backslash
				continue
			}
			v, ok := hex4(raw, i+2)
			if !ok {
				return len(raw), "" // not JSON; the decoder has said so
			}
			switch {
			case v == 0:
				return i, `\u0000 (jsonb cannot store a NUL character)`
			case v >= 0xDC00 && v <= 0xDFFF:
				return i, "a lone low surrogate escape"
			case v >= 0xD800 && v <= 0xDBFF:
				if lo, ok := lowSurrogateAt(raw, i+6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
					continue
				}
				return i, "a lone high surrogate escape"
			}
			i += 5
		}
	}
	return len(raw), ""
}

func lowSurrogateAt(raw []byte, at int) (rune, bool) {
	if at+1 >= len(raw) || raw[at] != '\\' || raw[at+1] != 'u' {
		return 0, false
	}
	return hex4(raw, at+2)
}

func hex4(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	var v rune
	for _, c := range raw[at : at+4] {
		v <<= 4
		switch {
		case '0' <= c && c <= '9':
			v |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			v |= rune(c-'a') + 10
		case 'A' <= c && c <= 'F':
			v |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return v, true
}

// scanNumber returns the end of the number token starting at at.
func scanNumber(raw []byte, at int) int {
	i := at
	for i < len(raw) {
		switch c := raw[i]; {
		case '0' <= c && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			i++
		default:
			return i
		}
	}
	return i
}

// numericRange says why PostgreSQL's numeric_in refuses a JSON number, or
// "" and the length of the number as PostgreSQL prints it. It follows
// numeric_in: digits and exponent give a display scale (fraction digits less
// the exponent, at least 0) and, for a value that is not zero, the count of
// digits before the point.
func numericRange(num []byte) (printed int, why string) {
	sign := 0
	if len(num) > 0 && num[0] == '-' {
		num, sign = num[1:], 1
	}
	var intPart, frac []byte
	i := 0
	for i < len(num) && num[i] >= '0' && num[i] <= '9' {
		i++
	}
	intPart = num[:i]
	if i < len(num) && num[i] == '.' {
		j := i + 1
		for j < len(num) && num[j] >= '0' && num[j] <= '9' {
			j++
		}
		frac, i = num[i+1:j], j
	}
	exp := 0
	if i < len(num) && (num[i] == 'e' || num[i] == 'E') {
		var ok bool
		if exp, ok = exponent(num[i+1:]); !ok {
			return 0, "is beyond the exponent PostgreSQL's numeric takes"
		}
	}
	scale := max(len(frac)-exp, 0)
	if scale > maxNumericScale {
		return 0, fmt.Sprintf("has %d digits after the decimal point; PostgreSQL's numeric holds %d", scale, maxNumericScale)
	}
	fraction := 0
	if scale > 0 {
		fraction = 1 + scale // the point and the digits after it
	}
	lead := 0
	digits := len(intPart) + len(frac)
	for lead < digits && digitAt(intPart, frac, lead) == '0' {
		lead++
	}
	if lead == digits {
		return 1 + fraction, "" // zero (printed unsigned): only its scale matters
	}
	before := len(intPart) - lead + exp
	if before > maxNumericIntDigits {
		return 0, fmt.Sprintf("has %d digits before the decimal point; PostgreSQL's numeric holds %d", before, maxNumericIntDigits)
	}
	return sign + max(before, 1) + fraction, ""
}

func digitAt(intPart, frac []byte, k int) byte {
	if k < len(intPart) {
		return intPart[k]
	}
	return frac[k-len(intPart)]
}

// exponent parses an exponent, ok=false when its magnitude reaches
// INT_MAX/2, where numeric_in refuses it whatever the digits.
func exponent(b []byte) (int, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		neg, b = b[0] == '-', b[1:]
	}
	v := 0
	for _, c := range b {
		v = v*10 + int(c-'0')
		if v >= maxNumericExponent {
			return 0, false
		}
	}
	if neg {
		v = -v
	}
	return v, true
}

func clip(b []byte) string {
	if len(b) > 24 {
		return string(b[:24]) + "…"
	}
	return string(b)
}
