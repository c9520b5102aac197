package httpapi_test

import (
	"encoding/json"
	"testing"
)

// getMany and getPrefix always carry rows (and getMany missing), [] when
// empty, as SPEC says: clients index them without a presence check.
// Before, omitempty dropped both when empty. A get still carries neither.
func TestKVEmptyListsAreSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(e.do("POST", "/api/v1/kv", []any{map[string]any{"op": "put", "ns": "el", "key": "k", "value": 1, "forever": true}}), 200)
	var body struct{ Results []map[string]json.RawMessage }
	e.expect(e.do("POST", "/api/v1/kv", []any{
		map[string]any{"op": "getPrefix", "ns": "el", "prefix": "none/"},
		map[string]any{"op": "getMany", "ns": "el", "keys": []string{"k"}},
		map[string]any{"op": "getMany", "ns": "el", "keys": []string{"absent"}},
		map[string]any{"op": "get", "ns": "el", "key": "k"},
	}), 200).json(t, &body)
	// Per result, each field's JSON, "" for a field that must be absent
	// and "*" for one that must be there with anything in it.
	want := []map[string]string{
		{"rows": "[]", "missing": ""},
		{"rows": "*", "missing": "[]"},
		{"rows": "[]", "missing": `["absent"]`},
		{"rows": "", "missing": ""},
	}
	if len(body.Results) != len(want) {
		t.Fatalf("%d results: %v", len(body.Results), body.Results)
	}
	for i, fields := range want {
		for field, w := range fields {
			got, present := body.Results[i][field]
			if (w == "") == present || (w != "*" && w != "" && string(got) != w) {
				t.Errorf("result %d (%s): %s is %q (present %v), want %q", i, body.Results[i]["op"], field, got, present, w)
			}
		}
	}
}
