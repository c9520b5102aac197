package httpapi

import "testing"

func TestJSONBSafe(t *testing.T) {
	for raw, ok := range map[string]bool{
		`{"a":"plain"}`:           true,
		`{"a":"\u0041\u00e9"}`:    true,
		`{"a":"\\u0000 is text"}`: true, // an escaped backslash, then text
		`{"a":"\ud83d\ude00"}`:    true, // a surrogate pair
		`{"a":"x\u0000y"}`:        false,
		`{"\u0000":1}`:            false, // keys too
		`{"a":"\ud83d"}`:          false,
		`{"a":"\ude00"}`:          false,
		`{"a":"\\\u0000"}`:        false,
		`[1,2,{"b":["\u0000"]}]`:  false,
		`"\ud83d\u0041"`:          false,
	} {
		if _, got := jsonbSafe([]byte(raw)); got != ok {
			t.Errorf("%s: safe=%v, want %v", raw, got, ok)
		}
	}
}
