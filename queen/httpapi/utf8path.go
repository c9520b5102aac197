package httpapi

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// invalidUTF8 names where in a JSON body its first byte that is not UTF-8
// sits ("items[0].payload", or "request body" outside any value), so the
// 400 names the field as every other refusal does. It walks the body only
// up to that byte and needs no valid JSON: a body that is not JSON is the
// decoder's to refuse after.
func invalidUTF8(body []byte) (field string, ok bool) {
	bad := firstInvalid(body)
	if bad < 0 {
		return "", true
	}
	type frame struct {
		array bool
		index int
		key   string
	}
	var stack []frame
	expectKey := false
	for i := 0; i < bad; i++ {
		switch body[i] {
		case '{':
			stack = append(stack, frame{})
			expectKey = true
		case '[':
			stack = append(stack, frame{array: true})
			expectKey = false
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',':
			if n := len(stack); n > 0 && stack[n-1].array {
				stack[n-1].index++
			} else {
				expectKey = true
			}
		case '"':
			end := stringEnd(body, i+1)
			if end >= bad {
				i = bad // the bad byte is in this string
				break
			}
			if n := len(stack); expectKey && n > 0 {
				stack[n-1].key = string(body[i+1 : end])
				expectKey = false
			}
			i = end
		}
	}
	var b strings.Builder
	for _, f := range stack {
		switch {
		case f.array:
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
		case f.key != "":
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.key)
		}
	}
	if b.Len() == 0 {
		return "request body", false
	}
	return b.String(), false
}

// firstInvalid is the offset of body's first byte that is not UTF-8, or -1.
func firstInvalid(body []byte) int {
	if utf8.Valid(body) {
		return -1
	}
	for i := 0; i < len(body); {
		r, n := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// stringEnd is the offset of the quote closing the string whose body
// starts at from, or len(body).
func stringEnd(body []byte, from int) int {
	for i := from; i < len(body); i++ {
		switch body[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(body)
}
