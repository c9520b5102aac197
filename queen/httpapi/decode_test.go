package httpapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// decodePushFast is the push decoder's first rule (decode.go) on body:
// the items it answers, and whether it takes the body as encoding/json
// would; mine is false for a body whose items array came twice, which the
// push decoder leaves to encoding/json.
func decodePushFast(body []byte) (items []pushItemWire, ok, mine bool) {
	s := scan{b: body}
	var l list[pushItemWire]
	ok = scanBody(&s, &l, itemsField, nil, nil) && !s.refused && l.has
	if !ok {
		return l.items, false, true
	}
	return typedItems(body, &l).items, true, !l.merged
}

// A push body whose items array comes twice: encoding/json decodes the
// later array into the earlier's elements, and so does the push decoder
// (typedItems), whatever else the body holds; the hand scanner that
// answered common bodies before let the later array replace the earlier.
func TestPushDuplicateItems(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"items":[{"queue":"a","partition":"p"}],"items":[{"queue":"b"}]}`, "b/p"},
		{`{"items":[{"queue":"a","partition":"p"}],"items":[{"queue":"\u0062"}]}`, "b/p"},
		{`{"items":[{"queue":"a","partition":"p"}],"ITEMS":[{"queue":"b"}]}`, "b/p"},
		{`{"items":[{"queue":"a","partition":"p"}],"items":null,"items":[{"queue":"b"}]}`, "b/"},
	} {
		items, err := parsePushBody([]byte(c.body))
		if err != nil || len(items) != 1 || items[0].Queue+"/"+items[0].Partition != c.want {
			t.Errorf("%s: %+v %v, want %s", c.body, items, err, c.want)
		}
	}
}

// pushFieldRE matches a refusal that names a field of the push body.
var pushFieldRE = regexp.MustCompile(`^items(\[\d+\](\.(queue|partition|transactionId|traceId|payload))?)? `)

// pushDecodersAgree fails when the scanner and encoding/json disagree on
// body: the scanner takes it by the first rule exactly when encoding/json
// decodes it, into the same items; and when the push decoder refuses a
// JSON object, its answer names a field. It reports whether the scanner
// read the items itself.
func pushDecodersAgree(t interface{ Fatalf(string, ...any) }, body []byte) bool {
	fast, ok, mine := decodePushFast(body)
	var b pushBody
	err := json.Unmarshal(body, &b)
	if took := err == nil && b.Items != nil; ok != took {
		t.Fatalf("body %q: the scanner took it: %v, encoding/json: %v (%v)", body, ok, took, err)
	}
	if _, err := parsePushBody(body); err != nil && !pushFieldRE.MatchString(err.Error()) {
		if _, notObject := decodeObject(body); notObject == nil || !strings.HasPrefix(err.Error(), "Invalid JSON: ") {
			t.Fatalf("body %q: the refusal %q names no field", body, err)
		}
	}
	if !ok {
		return false
	}
	if !reflect.DeepEqual(fast, *b.Items) {
		t.Fatalf("body %q: fast %s, encoding/json %s", body, wiresString(fast), wiresString(*b.Items))
	}
	return mine
}

func wiresString(ws []pushItemWire) string {
	var parts []string
	for _, w := range ws {
		f := func(s wireString) string { return fmt.Sprintf("%q", s) }
		parts = append(parts, fmt.Sprintf("{q:%s p:%s t:%s tr:%s payload:%q data:%q}", f(w.Queue), f(w.Partition),
			f(w.TransactionID), f(w.TraceID), w.Payload, w.Data))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// jsonText draws JSON text (and, now and then, text that is not quite
// JSON): any strings, escapes and invalid UTF-8 included, keys that differ
// from the body's names only by case, whitespace anywhere.
func jsonText(depth int) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		ws := rapid.SampledFrom([]string{"", "", " ", "\n\t"}).Draw(t, "ws")
		kinds := 6
		if depth > 2 {
			kinds = 4
		}
		switch rapid.IntRange(0, kinds-1).Draw(t, "kind") {
		case 0:
			return ws + quote(anyString().Draw(t, "s")) + ws
		case 1:
			return rapid.SampledFrom([]string{"null", "true", "false", "0", "-1.5e3", "12", "01", "1.", "tru", `"\u00"`}).Draw(t, "lit")
		case 2:
			return ws + rapid.SampledFrom([]string{`"plain"`, `"é漢🙂"`, `"a\"b"`, `"\u212aey"`, `"x\ny"`}).Draw(t, "str")
		case 3:
			return fmt.Sprint(rapid.Int().Draw(t, "n"))
		case 4:
			var els []string
			for range rapid.IntRange(0, 3).Draw(t, "len") {
				els = append(els, jsonText(depth+1).Draw(t, "el"))
			}
			return "[" + ws + strings.Join(els, ",") + "]"
		default:
			var fs []string
			for range rapid.IntRange(0, 3).Draw(t, "fields") {
				k := rapid.SampledFrom([]string{"a", "b c", "Queue", "payload"}).Draw(t, "k")
				fs = append(fs, quote(k)+ws+":"+jsonText(depth+1).Draw(t, "v"))
			}
			return "{" + strings.Join(fs, ",") + ws + "}"
		}
	})
}

// quote writes s as encoding/json does (escapes and all).
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// pushBodyText draws push bodies: mostly well formed, with every kind of
// field value and key spelling.
func pushBodyText() *rapid.Generator[string] {
	keys := []string{"queue", "partition", "transactionId", "traceId", "payload", "data",
		"QUEUE", "Payload", "other", "\u212aey", "queu"}
	return rapid.Custom(func(t *rapid.T) string {
		var items []string
		for range rapid.IntRange(0, 4).Draw(t, "items") {
			if rapid.IntRange(0, 20).Draw(t, "null item") == 0 {
				items = append(items, "null")
				continue
			}
			var fs []string
			for range rapid.IntRange(0, 6).Draw(t, "fields") {
				k := rapid.SampledFrom(keys).Draw(t, "key")
				var v string
				switch rapid.IntRange(0, 3).Draw(t, "value kind") {
				case 0, 1:
					v = rapid.SampledFrom([]string{`"q"`, `"orders"`, `"p-1"`, `"t-1"`, `null`}).Draw(t, "plain")
				default:
					v = jsonText(0).Draw(t, "value")
				}
				fs = append(fs, quote(k)+":"+v)
			}
			items = append(items, "{"+strings.Join(fs, ",")+"}")
		}
		body := `{"items":[` + strings.Join(items, ",") + `]}`
		switch rapid.IntRange(0, 9).Draw(t, "shape") {
		case 0:
			body = `{"other":` + jsonText(0).Draw(t, "other") + `,` + body[1:]
		case 1:
			body = `{"Items":[]}`
		case 2:
			body += rapid.SampledFrom([]string{" ", "x", "{}", "\n"}).Draw(t, "trailing")
		case 3:
			if len(body) > 2 {
				i := rapid.IntRange(0, len(body)-1).Draw(t, "cut")
				body = body[:i]
			}
		}
		return body
	})
}

// The hand-written push decoder answers exactly what encoding/json answers
// for every body it takes, and it takes the common ones. It fails with a
// key matched by case, an escaped string taken raw, a duplicate resolved
// the other way, or a value it should not have accepted.
func TestPushDecodersAgree(t *testing.T) {
	took, all := 0, 0
	rapid.Check(t, func(t *rapid.T) {
		for range 20 {
			all++
			if pushDecodersAgree(t, []byte(pushBodyText().Draw(t, "body"))) {
				took++
			}
		}
	})
	// Bodies it must give up on or answer exactly: keys that only case
	// (or the Kelvin sign) tells from a name, a duplicate, a null.
	for _, body := range []string{
		`{"items":[{"QUEUE":"q"}]}`, `{"ITEMS":[{"queue":"q"}]}`, `{"items":[{"queue":"q","Payload":1}]}`,
		`{"items":[{"Key":"q"}]}`, `{"items":[{"queue":"a\"b"}]}`, `{"items":[{"queue":"q"}],"items":null}`, `{"items":[{"queue":"a","partition":"p"}],"items":[{"queue":"b"}]}`,
		`{"items":[{"payload":1,"payload":2}]}`, `{"items":[{"queue":"q"},]}`, `{"items":[{"queue":"q"}]} x`,
	} {
		pushDecodersAgree(t, []byte(body))
	}
	for _, body := range []string{
		`{"items":[{"queue":"q","partition":"p","transactionId":"t","payload":{"a": [1, 2.5e-3, "x"]}}]}`,
		` { "items" : [ { "queue" : "q" , "data" : null } , {"queue":"r","payload":"s","payload":7} ] } `,
		`{"items":[],"note":{"deep":[[[]]]}}`,
		`{"items":[{"queue":"q","queue":null}]}`,
	} {
		if !pushDecodersAgree(t, []byte(body)) {
			t.Fatalf("the fast decoder gave up on a common body: %s", body)
		}
	}
	t.Logf("the fast decoder took %d of %d drawn bodies", took, all)
	if took*10 < all {
		t.Fatalf("the fast decoder took %d of %d bodies: the property compared almost nothing", took, all)
	}
}

// FuzzPushDecodersAgree is TestPushDecodersAgree on any bytes.
func FuzzPushDecodersAgree(f *testing.F) {
	f.Add([]byte(`{"items":[{"queue":"q","partition":"p","transactionId":"t","payload":{"a":1}}]}`))
	f.Add([]byte(`{"items":[{"Queue":"q"}]}`))
	f.Add([]byte(`{"items":[{"queue":"q\u0000"}]}`))
	f.Add([]byte(`{"items":[{"queue":"\u212a"}],"Items":null}`))
	f.Add([]byte(`{"items":[null]}`))
	f.Fuzz(func(t *testing.T, body []byte) { pushDecodersAgree(t, body) })
}

// BenchmarkPushBody: a 100-item push body, encoding/json against the
// hand-written decoder.
func BenchmarkPushBody(b *testing.B) {
	var items []string
	for i := range 100 {
		items = append(items, fmt.Sprintf(`{"queue":"orders","partition":"p%d","transactionId":"tx-%d","payload":{"orderId":%d,"customer":"ada","items":[{"sku":"x-1","qty":2}]}}`, i%10, i, i))
	}
	body := []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var p pushBody
			_ = json.Unmarshal(body, &p)
		}
	})
	b.Run("decodePushFast", func(b *testing.B) {
		for b.Loop() {
			_, _, _ = decodePushFast(body)
		}
	})
}
