package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// anyString draws strings a client or the database could hand us, invalid
// UTF-8 and control characters included.
func anyString() *rapid.Generator[string] {
	return rapid.OneOf(rapid.String(), rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) }),
		rapid.SampledFrom([]string{"", `"`, `\`, "<a&b>", "\u2028", "\x00\x1f\x7f", "\xff\xfe", "é漢🙂"}))
}

func optString(t *rapid.T, label string) *string {
	if rapid.Bool().Draw(t, label+"?") {
		return nil
	}
	s := anyString().Draw(t, label)
	return &s
}

// sameDocument fails unless a and b decode to the same JSON value.
func sameDocument(t *rapid.T, ours, theirs []byte) {
	if !json.Valid(ours) {
		t.Fatalf("not JSON: %q", ours)
	}
	var a, b any
	if err := json.Unmarshal(ours, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(theirs, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("ours %s\ntheirs %s", ours, theirs)
	}
}

// The hand-written encoders write what encoding/json writes, as a decoder
// sees it, for any strings and any stored payload; the check fails with a
// field dropped, renamed or escaped wrongly.
func TestEncodersMatchEncodingJSON(t *testing.T) {
	payloads := []json.RawMessage{nil, json.RawMessage(`{"a": 1, "b": [true, null, "x"]}`), json.RawMessage(`"s"`),
		json.RawMessage(`12.5e3`), json.RawMessage(`[]`), json.RawMessage(`{"k": "\u00e9\n"}`),
		json.RawMessage("\n { \"a b\" :\t[ 1 , \"c \\\" d\" ] }\r\n"), json.RawMessage(`"\\"`), json.RawMessage(` true `)}
	rapid.Check(t, func(t *rapid.T) {
		p := popWire{Success: rapid.Bool().Draw(t, "success"), Queue: anyString().Draw(t, "queue"), Partition: anyString().Draw(t, "partition"),
			PartitionID: anyString().Draw(t, "pid"), LeaseID: anyString().Draw(t, "lease"), ConsumerGroup: anyString().Draw(t, "group"),
			PartitionsClaimed: rapid.IntRange(0, 100).Draw(t, "claimed")}
		if rapid.Bool().Draw(t, "autopilot") {
			p.Autopilot = &autopilotWire{Partitions: rapid.Int().Draw(t, "ap"), Batch: rapid.Int().Draw(t, "ab")}
		}
		if !rapid.Bool().Draw(t, "nil messages") {
			p.Messages = []messageWire{}
			for i := range rapid.IntRange(0, 4).Draw(t, "n") {
				data := rapid.SampledFrom(payloads).Draw(t, "payload")
				_ = i
				p.Messages = append(p.Messages, messageWire{ID: anyString().Draw(t, "id"), TransactionID: anyString().Draw(t, "txid"),
					TraceID: optString(t, "trace"), Data: data, Payload: data, ProducerSub: optString(t, "sub"),
					CreatedAt: anyString().Draw(t, "at"), PartitionID: anyString().Draw(t, "mpid"), Partition: anyString().Draw(t, "mp"),
					Queue: anyString().Draw(t, "mq"), LeaseID: anyString().Draw(t, "ml"), ConsumerGroup: anyString().Draw(t, "mg"),
					RetryCount: rapid.Int().Draw(t, "retries"), Offset: rapid.Int64().Draw(t, "offset")})
			}
		}
		theirs, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		sameDocument(t, p.appendJSON(nil), theirs)

		acks := make([]ackResultWire, rapid.IntRange(0, 4).Draw(t, "acks"))
		for i := range acks {
			acks[i] = ackResultWire{Index: rapid.Int().Draw(t, "index"), TransactionID: anyString().Draw(t, "atx"), Success: rapid.Bool().Draw(t, "ok"),
				Error: optString(t, "err"), QueueName: optString(t, "aq"), PartitionName: optString(t, "ap"),
				LeaseReleased: rapid.Bool().Draw(t, "released"), DLQ: rapid.Bool().Draw(t, "dlq")}
		}
		theirs, err = json.Marshal(acks)
		if err != nil {
			t.Fatal(err)
		}
		sameDocument(t, appendAckResults(nil, acks), theirs)

		pushes := make([]pushResultWire, rapid.IntRange(0, 4).Draw(t, "pushes"))
		for i := range pushes {
			pushes[i] = pushResultWire{Index: rapid.Int().Draw(t, "pindex"), Status: anyString().Draw(t, "status"),
				QueueName: anyString().Draw(t, "pq"), TransactionIDSnake: anyString().Draw(t, "ptx_"), TransactionID: anyString().Draw(t, "ptx"),
				MessageIDSnake: anyString().Draw(t, "pm_"), MessageID: anyString().Draw(t, "pm"),
				PartitionIDSnake: anyString().Draw(t, "pp_"), PartitionID: anyString().Draw(t, "pp"),
				TraceIDSnake: optString(t, "pt_"), TraceID: optString(t, "pt")}
		}
		theirs, err = json.Marshal(pushes)
		if err != nil {
			t.Fatal(err)
		}
		sameDocument(t, appendPushResults(nil, pushes), theirs)
	})
}

func benchPop() popWire {
	p := popWire{Success: true, Queue: "orders", Partition: "p1", PartitionID: "01a23314-691f-7001-a649-750ac7b75811",
		LeaseID: "01a23314-6a5f-7000-ac6c-e060bb4bc9bc", ConsumerGroup: "__QUEUE_MODE__", PartitionsClaimed: 1}
	data := json.RawMessage(`{"orderId": 12345, "customer": "ada", "items": [{"sku": "x-1", "qty": 2}], "note": "leave at the door"}`)
	for i := range 10 {
		p.Messages = append(p.Messages, messageWire{ID: "01a23314-6a55-7001-9e01-f49d289f3997", TransactionID: fmt.Sprint("tx-", i),
			Data: data, Payload: data, CreatedAt: "2026-12-01T19:28:25.688877Z", PartitionID: p.PartitionID, Partition: "p1",
			Queue: "orders", LeaseID: p.LeaseID, ConsumerGroup: p.ConsumerGroup, Offset: int64(i)})
	}
	return p
}

// BenchmarkPopAnswer: a 10-message pop answer, encoding/json against the
// hand-written encoder.
func BenchmarkPopAnswer(b *testing.B) {
	p := benchPop()
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var buf bytes.Buffer
			_ = json.NewEncoder(&buf).Encode(p)
		}
	})
	b.Run("appendJSON", func(b *testing.B) {
		for b.Loop() {
			_ = p.appendJSON(make([]byte, 0, 5120))
		}
	})
}
