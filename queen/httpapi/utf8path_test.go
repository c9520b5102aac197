package httpapi

import "testing"

// TestInvalidUTF8NamesTheField: the 400 for a byte that is not UTF-8 names
// the JSON field it sits in, through objects, arrays, escaped quotes and
// keys before it.
func TestInvalidUTF8NamesTheField(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"{\"items\":[{\"queue\":\"n\",\"payload\":\"\xff\"}]}", "items[0].payload"},
		{"{\"items\":[{\"queue\":\"a\"},{\"queue\":\"b\\\"\xfe\"}]}", "items[1].queue"},
		{"{\"operations\":[{\"op\":\"x\",\"payload\":{\"deep\":[1,2,\"\xc3\"]}}]}", "operations[0].payload.deep[2]"},
		{"[{\"op\":\"schedule\",\"queue\":\"h\xff\"}]", "[0].queue"},
		{"\xff{}", "request body"},
		{"{\"k\xff\":1}", "request body"},
	} {
		got, ok := invalidUTF8([]byte(c.body))
		if ok || got != c.want {
			t.Errorf("%q: %q %v, want %q", c.body, got, ok, c.want)
		}
	}
	if _, ok := invalidUTF8([]byte(`{"items":[{"queue":"é"}]}`)); !ok {
		t.Error("valid UTF-8 refused")
	}
}
