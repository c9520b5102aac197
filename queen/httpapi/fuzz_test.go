package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/queen-go/queen/queen/ids"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store"
)

// Fuzz targets for every body decoder: no input panics, and whatever a
// decoder accepts is something the database takes (a queue name, JSON
// that jsonb stores), so a request is either refused with a 4xx or written
// whole.

func fuzzServer() *Server {
	return New(Options{Config: config.Default(), Clock: clock.Real{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func FuzzPushBody(f *testing.F) {
	f.Add([]byte(`{"items":[{"queue":"q","partition":"p","transactionId":"t","payload":{"a":1}}]}`))
	f.Add([]byte(`{"items":[{"queue":"q","payload":"\u0000"}]}`))
	f.Add([]byte(`{"items":[]}`))
	f.Add([]byte(`[1,2]`))
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/api/v1/push", bytes.NewReader(body))
		items, err := s.parsePush(r)
		if err != nil {
			return
		}
		for _, it := range items {
			if it.Queue == "" || !utf8.ValidString(it.Queue) {
				t.Fatalf("accepted queue %q", it.Queue)
			}
			if raw := it.Payload.Raw(); len(raw) > 0 {
				if !json.Valid(raw) {
					t.Fatalf("accepted a payload that is not JSON: %q", raw)
				}
				if err := limits.JSON("x", raw); err != nil {
					t.Fatalf("accepted a payload jsonb refuses (%v): %q", err, raw)
				}
			}
		}
	})
}

func FuzzTraceBody(f *testing.F) {
	f.Add([]byte(`{"transactionId":"t","partitionId":"01a22c56-622f-7000-85d2-8458ca5b958d","data":{"a":1},"traceNames":["x"]}`))
	f.Add([]byte(`{"transactionId":"t","partitionId":"01a22c56-622f-7000-85d2-8458ca5b958d","data":"\u0000","traceNames":"x"}`))
	f.Add([]byte(`{"transactionId":"","partitionId":null,"data":null}`))
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/api/v1/traces", bytes.NewReader(body))
		p, err := s.traceParams(r)
		if err != nil {
			return
		}
		if p.TransactionID == "" || !ids.Valid(p.PartitionID) || !json.Valid(p.Data) || p.EventType == "" || p.ConsumerGroup == "" {
			t.Fatalf("accepted trace %+v", p)
		}
		if err := limits.JSON("x", p.Data); err != nil {
			t.Fatalf("accepted data jsonb refuses (%v): %q", err, p.Data)
		}
		for _, n := range p.Names {
			if n == "" {
				t.Fatalf("accepted an empty trace name: %+v", p)
			}
		}
	})
}

func FuzzCycleBody(f *testing.F) {
	const id = "01a22c56-622f-7000-85d2-8458ca5b958d"
	f.Add([]byte(`{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":[{"type":"upsert","key":"k","value":{"n":1}}],` +
		`"push_items":[{"queue":"s","payload":{"a":1}}],"ack":{"transactionId":"t","leaseId":"l","count":2},"release_lease":false}`))
	f.Add([]byte(`{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":null,"push_items":null,"ack":null}`))
	f.Add([]byte(`{"query_id":"x","partition_id":"","state_ops":[{"type":"delete"}]}`))
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/streams/v1/cycle", bytes.NewReader(body))
		p, err := s.cycleParams(r)
		if err != nil {
			return
		}
		if !ids.Valid(p.QueryID) || !ids.Valid(p.PartitionID) || p.Group == "" {
			t.Fatalf("accepted ids %q %q group %q", p.QueryID, p.PartitionID, p.Group)
		}
		for _, op := range p.State {
			if op.Value != nil {
				if err := limits.JSON("value", op.Value); err != nil || !json.Valid(op.Value) {
					t.Fatalf("accepted a state value jsonb refuses (%v): %q", err, op.Value)
				}
			}
		}
		for _, it := range p.Push {
			if it.Queue == "" || !json.Valid(it.Payload.Raw()) {
				t.Fatalf("accepted push item %+v", it)
			}
		}
		if p.Ack != nil && (p.Ack.TransactionID == "" || p.Ack.Count < 0) {
			t.Fatalf("accepted ack %+v", p.Ack)
		}
	})
}

func FuzzTimerAndKVBodies(f *testing.F) {
	f.Add([]byte(`[{"op":"schedule","queue":"q","timerKey":"k","txn":"t","delayMs":5,"payload":"eyJhIjoxfQ=="}]`))
	f.Add([]byte(`{"operations":[{"op":"put","ns":"n","key":"k","value":1,"forever":true}]}`))
	f.Add([]byte(`[{"op":"getMany","ns":"n","keys":["a","b"]}]`))
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		if ops, err := s.parseTimerOps(body); err == nil {
			for _, op := range ops {
				if op.Queue == "" || op.TimerKey == "" || (op.Payload != nil && !json.Valid(op.Payload)) {
					t.Fatalf("accepted timer op %+v", op)
				}
			}
		}
		if ops, err := s.parseKVOps(body); err == nil {
			for _, op := range ops {
				if op.NS == "" || (op.Value != nil && !json.Valid(op.Value)) || len(op.Key) > s.cfg.KVMaxKeyBytes {
					t.Fatalf("accepted kv op %+v", op)
				}
			}
		}
	})
}

func FuzzTransactionOp(f *testing.F) {
	f.Add([]byte(`{"type":"push","items":[{"queue":"q","payload":1}]}`))
	f.Add([]byte(`{"type":"ack","transactionId":"t","partitionId":"01a22bd9-ae05-7000-b728-51e48ab01f24","status":"failed"}`))
	f.Add([]byte(`{"type":"nope"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		op, err := parseTxnOp(raw, 0)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "operations[0]") {
				t.Fatalf("the refusal %q names no field of the operation", err)
			}
			return
		}
		for _, it := range op.Items {
			if it.Queue == "" {
				t.Fatalf("accepted a push without a queue: %+v", op)
			}
		}
	})
}

func FuzzPopQuery(f *testing.F) {
	f.Add("batch=10&wait=true&timeout=1000&consumerGroup=g&subscriptionMode=new")
	f.Add("batch=-1&partitions=99999999999&leaseSeconds=0&subscriptionFrom=now")
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, query string) {
		if _, err := url.ParseQuery(query); err != nil {
			return
		}
		r := httptest.NewRequest("GET", "/api/v1/pop/queue/q", nil)
		r.URL.RawQuery = query
		r.SetPathValue("queue", "q")
		r = r.WithContext(contextWithTenant(r))
		p, err := s.parsePop(r)
		if err != nil {
			return
		}
		if p.req.Batch < 1 || p.req.Batch > s.cfg.MaxPopBatch {
			t.Fatalf("accepted batch %d", p.req.Batch)
		}
	})
}

func contextWithTenant(r *http.Request) context.Context {
	return context.WithValue(r.Context(), tenantKey, config.DefaultTenant)
}

// FuzzAckBatchParsersAgree: the ack parser (parseAckBatch: the scanner
// under encoding/json's rule, else key by key, then the one check of an
// item) takes exactly the batches that ackBatchOracle, the batch's rules
// stated over encoding/json's generic values, takes, and reads the same
// group and items from them. (encoding/json's struct decoding also takes
// keys in another case; those bodies are not compared with the oracle.)
// On every body, ackDecodersAgree holds the scanner's first rule to
// encoding/json.
func FuzzAckBatchParsersAgree(f *testing.F) {
	f.Add([]byte(`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":"completed","leaseId":"l"}],"consumerGroup":"g"}`))
	f.Add([]byte(`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":true}]}`))
	f.Add([]byte(`{"acknowledgments":[{"transactionId":"","partitionId":"p"}]}`))
	f.Add([]byte(`{"acknowledgments":[{"transactionId":"t\u0000","partitionId":"p","error":"x"}]}`))
	f.Add([]byte(`{"acknowledgments":[],"consumerGroup":null}`))
	f.Add([]byte(`{"acknowledgments":[{"transactionId":"t","partitionId":"p","error":"\u0000"}]}`))
	f.Add([]byte(`{"acknowledgments":[{"transactionId":"t","partitionId":"p","leaseId":"\u0000"}],"consumerGroup":"\u0000"}`))
	f.Add([]byte(`{"Acknowledgments":[{"TransactionId":"t","partitionId":"p"}]}`))
	f.Add([]byte(`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":null,"leaseId":5}],"n":1e999}`))
	f.Add([]byte(`{"acknowledgments":[null,{"transactionId":"t","partitionId":"p","status":false}]}`))
	f.Add([]byte(`{"acknowledgments":[{"transactionId":"t","partitionId":"p","status":null},{"transactionId":"u","partitionId":"p","status":true}]}`))
	f.Add([]byte(`{"acknowledgments":[{"transactionId":"t","partitionId":"p"}],"ACKNOWLEDGMENTS":[{"status":"failed"}]}`))
	f.Add([]byte(`{"consumerGroup":"g","acknowledgments":5}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ackDecodersAgree(t, body)
		if caseVariantKeys(body) {
			return
		}
		g, items, err := parseAckBatch(body)
		og, oitems, ok := ackBatchOracle(body)
		switch {
		case err != nil && ok:
			t.Fatalf("the parser refused (%v), the oracle took %q %+v", err, og, oitems)
		case err == nil && !ok:
			t.Fatalf("the parser took %q %+v, the oracle refused", g, items)
		case err == nil && (g != og || !reflect.DeepEqual(items, oitems)):
			t.Fatalf("the parser read %q %+v, the oracle %q %+v", g, items, og, oitems)
		}
	})
}

// ackFieldRE matches a refusal that names a field of the ack batch.
var ackFieldRE = regexp.MustCompile(`^(consumerGroup|acknowledgments(\[\d+\](\.(transactionId|partitionId|status|leaseId|error))?)?) `)

// ackDecodersAgree fails when the scanner and encoding/json disagree on
// an ack batch: the scanner takes it by the first rule exactly when
// encoding/json decodes it, into the same acknowledgements and group; and
// when the ack parser refuses a JSON object, its answer names a field.
func ackDecodersAgree(t *testing.T, body []byte) {
	s := scan{b: body}
	var l list[ackItemWire]
	var g wireString
	var gf itemFlags
	ok := scanBody(&s, &l, ackBatchFields, &g, &gf) && !s.refused && l.has
	var b ackBatchBody
	err := json.Unmarshal(body, &b)
	if took := err == nil && b.Acknowledgments != nil; ok != took {
		t.Fatalf("body %q: the scanner took it: %v, encoding/json: %v (%v)", body, ok, took, err)
	}
	if ok && !l.merged && (g != b.ConsumerGroup || !reflect.DeepEqual(l.items, *b.Acknowledgments)) {
		t.Fatalf("body %q: the scanner read %q %+v, encoding/json %q %+v", body, g, l.items, b.ConsumerGroup, *b.Acknowledgments)
	}
	if _, _, err := parseAckBatch(body); err != nil && !ackFieldRE.MatchString(err.Error()) {
		if _, notObject := decodeObject(body); notObject == nil || !strings.HasPrefix(err.Error(), "Invalid JSON: ") {
			t.Fatalf("body %q: the refusal %q names no field", body, err)
		}
	}
}

// ackBatchOracle states what an ack batch must hold to be taken, and what
// it then says, over encoding/json's generic values (keys matched exactly).
func ackBatchOracle(body []byte) (group string, items []store.AckItem, ok bool) {
	var b map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if !json.Valid(body) || dec.Decode(&b) != nil || b == nil {
		return "", nil, false
	}
	acks, isArray := b["acknowledgments"].([]any)
	group, ok = oracleString(b, "consumerGroup", limits.ConsumerGroup)
	if !isArray || !ok {
		return "", nil, false
	}
	items = make([]store.AckItem, len(acks))
	for i, raw := range acks {
		o, isObject := raw.(map[string]any)
		if !isObject {
			return "", nil, false
		}
		a := &items[i]
		var okT, okP, okS, okL, okE bool
		a.TransactionID, okT = oracleString(o, "transactionId", limits.TransactionID)
		a.PartitionID, okP = oracleString(o, "partitionId", limits.Field{})
		if done, isBool := o["status"].(bool); isBool {
			a.Status, okS = map[bool]string{true: "completed", false: "failed"}[done], true
		} else {
			a.Status, okS = oracleString(o, "status", limits.Status)
		}
		a.LeaseID, okL = oracleString(o, "leaseId", limits.LeaseID)
		a.Error, okE = oracleString(o, "error", limits.ErrorText)
		if !okT || !okP || !okS || !okL || !okE || a.TransactionID == "" || a.PartitionID == "" {
			return "", nil, false
		}
	}
	return group, items, true
}

// oracleString is field name of o: absent or null is "", a string within
// f's limits is itself, anything else is refused.
func oracleString(o map[string]any, name string, f limits.Field) (string, bool) {
	switch v := o[name].(type) {
	case nil:
		return "", true
	case string:
		return v, f.CheckAs(name, v) == nil
	default:
		return "", false
	}
}

// caseVariantKeys reports whether any object in body has a key that is not
// one of the ack batch's names but matches one of them ignoring case.
func caseVariantKeys(body []byte) bool {
	names := []string{"acknowledgments", "consumerGroup", "transactionId", "partitionId", "status", "leaseId", "error"}
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		k, isStr := tok.(string)
		if !isStr {
			continue
		}
		for _, n := range names {
			if k != n && strings.EqualFold(k, n) {
				return true
			}
		}
	}
}
