package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The wire corpus pins the answers of the body decoders (push, ack, ack
// batch, the transaction route, the stream cycle's push items) byte for
// byte: testdata/wire_corpus.jsonl holds bodies and the (status, body) the
// real handlers answered when the corpus was recorded, before the push
// decoders and the ack parsers were merged into one each. Replaying it
// proves the merge changed no answer: every 400 still names the same field
// in the same words, and every body taken is still taken.
//
// QUEEN_RECORD_WIRE=1 rewrites the file from wireCorpus (only ever against
// code known to answer right).

const wireCorpusFile = "testdata/wire_corpus.jsonl"

// wireCase is one request of the corpus. The body is Body (or Body64 when
// it is not UTF-8), then Rep repeated Times times, then Tail: the bodies of
// ten thousand items stay short on disk.
type wireCase struct {
	Route  string `json:"route"`
	Body   string `json:"body,omitempty"`
	Body64 []byte `json:"body64,omitempty"`
	Rep    string `json:"rep,omitempty"`
	Times  int    `json:"times,omitempty"`
	Tail   string `json:"tail,omitempty"`
	Status int    `json:"status"`
	Answer string `json:"answer"`
}

func (c wireCase) bytes() []byte {
	b := []byte(c.Body)
	if c.Body64 != nil {
		b = append([]byte(nil), c.Body64...)
	}
	b = append(b, strings.Repeat(c.Rep, c.Times)...)
	return append(b, c.Tail...)
}

func TestWireCorpus(t *testing.T) {
	e := newEnv(t)
	if os.Getenv("QUEEN_RECORD_WIRE") == "1" {
		recordWireCorpus(t, e)
		return
	}
	f, err := os.Open(wireCorpusFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	n := 0
	for sc.Scan() {
		var c wireCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		n++
		r := e.do("POST", c.Route, c.bytes())
		if got := normalizeIDs(r.body); r.status != c.Status || got != c.Answer {
			t.Errorf("case %d, %s %.200q:\n got %d %.300s\nwant %d %.300s", n, c.Route, c.bytes(), r.status, got, c.Status, c.Answer)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 500 {
		t.Fatalf("the corpus holds %d cases: too few to prove anything", n)
	}
	t.Logf("%d answers replayed", n)
}

func recordWireCorpus(t *testing.T, e *env) {
	var out bytes.Buffer
	for _, c := range wireCorpus(t) {
		r := e.do("POST", c.Route, c.bytes())
		c.Status, c.Answer = r.status, normalizeIDs(r.body)
		line, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(append(line, '\n'))
	}
	if err := os.WriteFile(wireCorpusFile, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// normalizeIDs names the ids the broker made up (message, partition and
// transaction ids) by their order in the answer, so answers compare across
// runs.
func normalizeIDs(body []byte) string {
	seen := map[string]string{}
	return uuidRE.ReplaceAllStringFunc(string(body), func(id string) string {
		if _, ok := seen[id]; !ok {
			seen[id] = fmt.Sprintf("<id%d>", len(seen)+1)
		}
		return seen[id]
	})
}

const (
	routePush  = "/api/v1/push"
	routeAck   = "/api/v1/ack"
	routeBatch = "/api/v1/ack/batch"
	routeTxn   = "/api/v1/transaction"
	routeCycle = "/streams/v1/cycle"
	someUUID   = "01a22c56-622f-7000-85d2-8458ca5b958d"
)

// wireValues are the values every field is tried with: each JSON type,
// strings at and past the limits, escapes, characters the limits refuse.
var wireValues = []string{
	`"q"`, `""`, `null`, `5`, `-0.5e3`, `true`, `false`, `{}`, `[]`, `["q"]`, `{"a":1}`,
	`"a\u0000b"`, `"\u0041b"`, `"bad\u0001"`, `"tab\there"`, `"\u212a"`, `"é漢🙂"`, `"not-a-uuid"`, `"` + someUUID + `"`,
	`"` + strings.Repeat("x", 64) + `"`, `"` + strings.Repeat("x", 65) + `"`, `"` + strings.Repeat("x", 255) + `"`,
	`"` + strings.Repeat("x", 256) + `"`, `"` + strings.Repeat("x", 1025) + `"`,
	`1e999`, `123456789012345678901234567890`, `"\ud800"`, `"\udc00x"`, `"completed"`, `"failed"`,
}

// wireCorpus builds the bodies: the package tests' and the fuzz seeds',
// then every field of each body with every value, keys in another case,
// duplicate keys, missing and unknown fields, null and non-object items,
// each top-level shape, and seeded random mixtures of all of that.
func wireCorpus(t *testing.T) []wireCase {
	var cs []wireCase
	add := func(route string, bodies ...string) {
		for _, b := range bodies {
			cs = append(cs, wireCase{Route: route, Body: b})
		}
	}
	add(routePush, testPushBodies...)
	add(routeAck, testAckBodies...)
	add(routeBatch, testBatchBodies...)
	add(routeTxn, testTxnBodies...)
	for _, dir := range []string{"FuzzPushBody", "FuzzTransactionOp"} {
		for _, b := range fuzzSeeds(t, dir) {
			cs = append(cs, wireCase{Route: routePush, Body64: b}, wireCase{Route: routeTxn, Body64: b},
				wireCase{Route: routeTxn, Body64: append(append([]byte(`{"operations":[`), b...), "]}"...)})
		}
	}
	add(routePush, shapeBodies(`items`)...)
	add(routeBatch, shapeBodies(`acknowledgments`)...)
	add(routeAck, shapeBodies(`transactionId`)...)
	add(routeTxn, shapeBodies(`operations`)...)
	pushFields := []string{"queue", "partition", "transactionId", "traceId", "payload", "data", "Queue", "QUEUE", "Payload", "\u212aueue", "other"}
	ackFields := []string{"transactionId", "partitionId", "status", "leaseId", "error", "consumerGroup", "TransactionId", "STATUS", "other"}
	for _, f := range pushFields {
		for _, v := range wireValues {
			it := setField(`{"queue":"q","payload":1}`, f, v)
			add(routePush, `{"items":[`+it+`]}`, `{"items":[{"queue":"a"},`+it+`]}`)
			add(routeTxn, `{"operations":[{"type":"push","items":[`+it+`]}]}`, `{"operations":[`+setField(`{"type":"push","queue":"q"}`, f, v)+`]}`)
			add(routeCycle, `{"query_id":"`+someUUID+`","partition_id":"`+someUUID+`","push_items":[`+it+`]}`)
		}
	}
	base := `{"transactionId":"t","partitionId":"` + someUUID + `","leaseId":"l","status":"completed"}`
	for _, f := range ackFields {
		for _, v := range wireValues {
			a := setField(base, f, v)
			add(routeAck, a)
			add(routeBatch, `{"acknowledgments":[`+a+`]}`, `{"consumerGroup":"g","acknowledgments":[`+base+`,`+a+`]}`,
				setField(`{"acknowledgments":[`+base+`]}`, f, v))
			add(routeTxn, `{"operations":[`+setField(`{"type":"ack","transactionId":"t","partitionId":"`+someUUID+`"}`, f, v)+`]}`)
		}
	}
	long := `"` + strings.Repeat("e", 65537) + `"`
	add(routeAck, setField(base, "error", long))
	add(routeBatch, `{"acknowledgments":[`+setField(base, "error", long)+`]}`)
	cs = append(cs, bigBodies()...)
	rng := rand.New(rand.NewPCG(30, 1))
	for range 400 {
		add(routePush, randomBody(rng, "items", pushFields))
		add(routeBatch, randomBody(rng, "acknowledgments", ackFields))
		add(routeAck, randomObject(rng, ackFields))
		add(routeTxn, randomTxn(rng, pushFields, ackFields))
	}
	return cs
}

// setField sets key f of the JSON object obj to v: replacing it when
// present, else appended (so duplicates come from the random bodies).
func setField(obj, f, v string) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(obj), &m); err != nil {
		panic(err)
	}
	key := strconv.Quote(f)
	if _, ok := m[f]; ok {
		i := strings.Index(obj, key+":")
		rest := obj[i+len(key)+1:]
		var old json.RawMessage
		if err := json.NewDecoder(strings.NewReader(rest)).Decode(&old); err != nil {
			panic(err)
		}
		j := strings.Index(rest, string(old))
		return obj[:i] + key + ":" + v + rest[j+len(old):]
	}
	if obj == "{}" {
		return "{" + key + ":" + v + "}"
	}
	return obj[:len(obj)-1] + "," + key + ":" + v + "}"
}

// shapeBodies are bodies of each top-level shape, with name as the array.
func shapeBodies(name string) []string {
	n := strconv.Quote(name)
	return []string{
		` `, `null`, `[]`, `[1,2]`, `"x"`, `5`, `true`, `{}`, `{"x":1}`, `{` + n + `:null}`, `{` + n + `:5}`, `{` + n + `:"x"}`,
		`{` + n + `:{}}`, `{` + n + `:[]}`, `{` + n + `:[null]}`, `{` + n + `:[5]}`, `{` + n + `:["x"]}`, `{` + n + `:[[]]}`,
		`{` + n + `:[{}]}`, `{` + n + `:[]} x`, `{` + n + `:[]}{}`, `{` + n + `:[],}`, `{` + n + `:[{},]}`, `{` + n + `:[`,
		`{` + strings.ToUpper(n) + `:[]}`, `{` + n + `:[],` + n + `:null}`, `{` + n + `:null,` + n + `:[]}`,
		`{` + n + `:[],` + strings.ToUpper(n) + `:5}`, `{` + n + `:[{"queue":"q","payload":1}]}`,
		"\t{" + n + ":[ ]}\n", `{"\u0069tems":[]}`, `{` + n + `:[],"other":{"deep":[[[{"a":[]}]]]}}`,
		`{` + n + `:[{"queue":"q","payload":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}]}`,
		`{` + n + `:[{"queue":"q","payload":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}]}`,
		`{` + n + `:[{"transactionId":"t","partitionId":"p","status":{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}}]}`,
	}
}

// bigBodies are pushes at and past limits.PushItems, each way the decoders
// count items: the hand scanner stops at the first item past the limit
// whatever follows, encoding/json counts them all.
func bigBodies() []wireCase {
	it := `{"queue":"big","payload":1},`
	return []wireCase{
		{Route: routePush, Body: `{"items":[`, Rep: it, Times: 10000, Tail: `{"queue":"big"}]}`},
		{Route: routePush, Body: `{"items":[`, Rep: it, Times: 10001, Tail: `garbage`},
		{Route: routePush, Body: `{"items":[{"QUEUE":"big"},`, Rep: it, Times: 10000, Tail: `{"queue":"big"}]}`},
		{Route: routePush, Body: `{"items":[{"queue":5},`, Rep: it, Times: 10000, Tail: `{"queue":"big"}]}`},
		{Route: routePush, Body: `{"items":[{"queue":5},`, Rep: it, Times: 9998, Tail: `{"queue":"big"}]}`},
		{Route: routeTxn, Body: `{"operations":[{"type":"push","items":[`, Rep: it, Times: 10000, Tail: `{"queue":"big"}]}]}`},
		{Route: routeBatch, Body: `{"acknowledgments":[`, Rep: `{"transactionId":"t","partitionId":"p"},`, Times: 3000, Tail: `{"transactionId":"t"}]}`},
	}
}

func randomValue(rng *rand.Rand) string {
	if rng.IntN(3) == 0 {
		return []string{`"q"`, `"p"`, `null`, `"t"`, `"` + someUUID + `"`}[rng.IntN(5)]
	}
	return wireValues[rng.IntN(len(wireValues))]
}

func randomObject(rng *rand.Rand, fields []string) string {
	var fs []string
	for range rng.IntN(7) {
		fs = append(fs, strconv.Quote(fields[rng.IntN(len(fields))])+":"+randomValue(rng))
	}
	return "{" + strings.Join(fs, ",") + "}"
}

func randomBody(rng *rand.Rand, name string, fields []string) string {
	var items []string
	for range rng.IntN(4) {
		switch rng.IntN(12) {
		case 0:
			items = append(items, "null")
		case 1:
			items = append(items, randomValue(rng))
		default:
			items = append(items, randomObject(rng, fields))
		}
	}
	body := `{"` + name + `":[` + strings.Join(items, ",") + `]`
	if rng.IntN(3) == 0 {
		body += `,"consumerGroup":` + randomValue(rng)
	}
	if rng.IntN(8) == 0 {
		body += `,"` + strings.ToUpper(name[:1]) + name[1:] + `":` + randomValue(rng)
	}
	return body + "}"
}

func randomTxn(rng *rand.Rand, pushFields, ackFields []string) string {
	var ops []string
	for range 1 + rng.IntN(3) {
		switch rng.IntN(4) {
		case 0:
			ops = append(ops, `{"type":"push","items":[`+randomObject(rng, pushFields)+`]}`)
		case 1:
			ops = append(ops, `{"type":"push",`+randomObject(rng, pushFields)[1:])
		case 2:
			ops = append(ops, `{"type":"ack",`+randomObject(rng, ackFields)[1:])
		default:
			ops = append(ops, randomObject(rng, append([]string{"type", "items"}, ackFields...)))
		}
	}
	for i, op := range ops {
		ops[i] = strings.Replace(op, ",}", "}", 1)
	}
	return `{"operations":[` + strings.Join(ops, ",") + `]}`
}

// fuzzSeeds reads the seed corpus of a fuzz target.
func fuzzSeeds(t *testing.T, target string) [][]byte {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if s, ok := strings.CutPrefix(line, "[]byte("); ok {
				b, err := strconv.Unquote(strings.TrimSuffix(s, ")"))
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				out = append(out, []byte(b))
			}
		}
	}
	return out
}

// The package tests' push, ack and transaction bodies, and the fuzz
// targets' seeds (f.Add).
var (
	testPushBodies = []string{
		`{"items":`, `[1,2]`, `{}`, `{"items":"x"}`, `{"items":[{"queue":"ok"},{"payload":1}]}`, `{"items":[{"queue":5}]}`,
		`{"items":[{"queue":"ok","partition":7}]}`, `{"items":[{"queue":"ok","transactionId":{}}]}`,
		`{"items":[{"queue":"ok","traceId":"not-a-uuid"}]}`, `{"items":[{"queue":"bad\u0001name"}]}`, `{"items":[3]}`,
		`{"items":[{"queue":"ok"},{"queue":"ok","payload":{"s":"a\u0000b"}}]}`, `{"items":[{"queue":"ok","data":"\udc00"}]}`,
		`{"items":[]}`, `{"items":[{"queue":"n","payload":{"n":1e200000}}]}`, `{"items":[{"queue":"n","payload":[1, 1.5e-16383]}]}`,
		`{"items":[{"queue":"q","partition":"p","transactionId":"t","payload":{"a":1}}]}`, `{"items":[{"queue":"q","payload":"\u0000"}]}`,
		`{"items":[{"Queue":"q"}]}`, `{"items":[{"queue":"q\u0000"}]}`, `{"items":[{"queue":"\u212a"}],"Items":null}`, `{"items":[null]}`,
		`{"items":[{"QUEUE":"q"}]}`, `{"ITEMS":[{"queue":"q"}]}`, `{"items":[{"queue":"q","Payload":1}]}`, `{"items":[{"Key":"q"}]}`,
		`{"items":[{"queue":"a\"b"}]}`, `{"items":[{"queue":"q"}],"items":null}`, `{"items":[{"payload":1,"payload":2}]}`,
		`{"items":[{"queue":"q"},]}`, `{"items":[{"queue":"q"}]} x`,
		`{"items":[{"queue":"q","partition":"p","transactionId":"t","payload":{"a": [1, 2.5e-3, "x"]}}]}`,
		` { "items" : [ { "queue" : "q" , "data" : null } , {"queue":"r","payload":"s","payload":7} ] } `,
		`{"items":[],"note":{"deep":[[[]]]}}`, `{"items":[{"queue":"q","queue":null}]}`,
		`{"items":[{"queue":5,"queue":"q"}]}`, `{"items":[{"queue":"q","QUEUE":5}]}`, `{"items":[{"QUEUE":"q","partition":5}]}`,
		`{"items":[{"queue":"q"}],"ITEMS":5}`, `{"items":[null,{"queue":5}]}`, `{"items":[{"partition":5}]}`,
		`{"items":[{"Queue":"q","queue":"r"}]}`, `{"items":[{"queue":"r","Queue":"q"}]}`, `{"items":[{"queue":"q","payload":1,"data":2}]}`,
		`{"items":[{"queue":"q","data":2}]}`, `{"items":[{"queue":"q","payload":null,"data":2}]}`, `{"items":[{"queue":"q","Data":2,"partition":[]}]}`,
	}
	testAckBodies = []string{
		`{"partitionId":"x"}`, `{"transactionId":"x"}`, `{"transactionId":"x","partitionId":"y","leaseId":5}`,
		`{"transactionId":"a\u0000","partitionId":"01a22c56-622f-7000-85d2-8458ca5b958d"}`,
		`{"transactionId":"a","partitionId":"01a22c56-622f-7000-85d2-8458ca5b958d","leaseId":"l\u0000"}`,
		`{"transactionId":"s1","partitionId":"` + someUUID + `","leaseId":"l","status":"failed"}`,
		`{"transactionId":"s1","partitionId":"` + someUUID + `","status":true}`, `{"transactionId":"s1","partitionId":"` + someUUID + `","status":false}`,
		`{"transactionId":"s1","partitionId":"y","status":"x","consumerGroup":5}`, `{"transactionId":5,"partitionId":"y"}`,
	}
	testBatchBodies = []string{
		`{}`, `{"acknowledgments":[{"transactionId":"x"}]}`,
		`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":"completed","leaseId":"l"}],"consumerGroup":"g"}`,
		`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":true}]}`, `{"acknowledgments":[{"transactionId":"","partitionId":"p"}]}`,
		`{"acknowledgments":[{"transactionId":"t\u0000","partitionId":"p","error":"x"}]}`, `{"acknowledgments":[],"consumerGroup":null}`,
		`{"acknowledgments":[{"transactionId":"t","partitionId":"p","error":"\u0000"}]}`,
		`{"acknowledgments":[{"transactionId":"t","partitionId":"p","leaseId":"\u0000"}],"consumerGroup":"\u0000"}`,
		`{"Acknowledgments":[{"TransactionId":"t","partitionId":"p"}]}`,
		`{"acknowledgments":[{"transactionId":"t\u0000"}]}`, `{"acknowledgments":[{"transactionId":"t\u0000","partitionId":"p","status":"` + strings.Repeat("s", 65) + `"}]}`,
		`{"acknowledgments":[null]}`, `{"acknowledgments":[null,{"status":true}]}`, `{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":true}],"consumerGroup":5}`,
		`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":1}]}`, `{"acknowledgments":[{"transactionId":"t","TRANSACTIONID":5,"partitionId":"p"}]}`,
	}
	testTxnBodies = []string{
		`{}`, `{"operations":[]}`, `{"operations":[{"type":"nope"}]}`, `{"operations":[{"type":"ack","transactionId":"x","partitionId":"y"}]}`,
		`{"operations":[{"type":"push","items":[{"payload":1}]}]}`, `{"operations":[{"type":"push","queue":"q"}],"requiredLeases":[1]}`,
		`{"operations":[{"type":"push","items":[{"queue":"n","payload":{"n":1e200000}}]}]}`,
		`{"operations":[{"type":"push","items":[{"queue":"q","payload":1}]},{"type":"ack","transactionId":"t","partitionId":"` + someUUID + `","status":"failed"}]}`,
		`{"operations":[{"type":"push","items":[]}]}`, `{"operations":[{"type":"push","items":null,"queue":"q"}]}`, `{"operations":[{"type":"push","items":5}]}`,
		`{"operations":[null]}`, `{"operations":[5]}`, `{"operations":[{"type":5}]}`, `{"operations":[{"type":"PUSH","queue":"q"}]}`,
		`{"operations":[{"type":"ack","transactionId":"t","partitionId":"` + someUUID + `","consumerGroup":5}]}`,
		`{"operations":[{"type":"ack","transactionId":"t","partitionId":"` + someUUID + `","status":true,"consumerGroup":"g"}]}`,
	}
)
