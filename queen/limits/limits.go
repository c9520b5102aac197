// Package limits is the one table of client-supplied fields and the most
// PostgreSQL will store and index for each. Every route checks what a client
// sends through it, before anything is written or buffered, so an input the
// database would refuse is answered 400 naming the field and never reaches a
// statement or the spool (where it could only fail again at replay, after the
// push was answered).
//
// Lengths are bytes of UTF-8, not characters: the bound that matters is a
// btree index row (2704 bytes on 8 KiB pages), and the widest index that
// holds client text is consumer_groups_metadata's primary key (tenant, group,
// queue, partition, namespace, task): five names of at most 255 bytes each
// fit it with room for the tuple and varlena headers, even incompressible.
package limits

import (
	"fmt"
	"unicode/utf8"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/ids"
)

// Field is one client-supplied string and its bound.
type Field struct {
	Name string // the wire name, as errors say it
	Max  int    // bytes; 0 means no length bound (a UUID or free text)
	UUID bool   // must be a UUID
	// Text: free text (an error message, a trace name's data): control
	// characters are allowed; PostgreSQL's text refuses only NUL.
	Text bool
	Why  string // where the bound comes from (SPEC's table)
}

// The fields. A route that takes a string from a client checks it against
// one of these.
var (
	Queue = Field{Name: "queue", Max: 255,
		Why: "queues (tenant_id, name) and consumer_groups_metadata's primary key index it"}
	Partition = Field{Name: "partition", Max: 255,
		Why: "partitions (queue_id, name) and consumer_groups_metadata's primary key index it"}
	ConsumerGroup = Field{Name: "consumerGroup", Max: 255,
		Why: "partition_consumers and consumer_groups_metadata's primary keys index it"}
	Namespace = Field{Name: "namespace", Max: 255,
		Why: "queues (tenant_id, namespace, task) and consumer_groups_metadata's primary key index it"}
	Task = Field{Name: "task", Max: 255,
		Why: "queues (tenant_id, namespace, task) and consumer_groups_metadata's primary key index it"}
	TransactionID = Field{Name: "transactionId", Max: 1024,
		Why: "messages (partition_id, transaction_id) is unique; Queen's Rust broker allows 65535, which the index cannot hold"}
	TraceID   = Field{Name: "traceId", UUID: true, Why: "stored as uuid"}
	TraceName = Field{Name: "traceName", Max: 255,
		Why: "message_trace_names (trace_id, trace_name) and (trace_name) index it"}
	EventType = Field{Name: "eventType", Max: 255, Why: "a label, not a document"}
	ErrorText = Field{Name: "error", Max: 65536, Text: true, Why: "kept with the DLQ row; a bound keeps one ack small"}
	TimerKey  = Field{Name: "timerKey", Max: 512, Text: true,
		Why: "log_timers (tenant_id, queue, timer_key) is the primary key; as QUEEN_KV_MAX_KEY_BYTES"}
	KVNamespace = Field{Name: "ns", Max: 255, Text: true, Why: "kv (tenant_id, namespace, key) is the primary key"}
	// KVKey's bound is QUEEN_KV_MAX_KEY_BYTES (512 by default, at most
	// MaxKVKeyBytes); routes check it with Within.
	KVKey = Field{Name: "key", Max: 512, Text: true,
		Why: "kv (tenant_id, namespace, key) is the primary key; QUEEN_KV_MAX_KEY_BYTES sets it"}
	StreamQuery = Field{Name: "name", Max: 255,
		Why: "queen_streams.queries (tenant_id, name) is unique"}
	StreamKey = Field{Name: "key", Max: 512, Text: true,
		Why: "queen_streams.state (query_id, partition_id, key) is the primary key"}
	// LeaseID is compared with the lease's token (a UUID the broker
	// minted); an ack's is never stored, so only its text is bounded.
	LeaseID = Field{Name: "leaseId", Max: 255, Why: "compared with a lease token in a statement"}
	Status  = Field{Name: "status", Max: 64, Why: "one of a few words; compared, never stored"}
)

// Number is a client-supplied number that becomes a PostgreSQL interval or
// integer, and its bounds.
type Number struct {
	Name     string
	Min, Max float64
	Why      string
}

// The numbers a statement turns into an interval: past these,
// make_interval overflows (SQLSTATE 22008) or the row is unreadable.
var (
	TTLSeconds = Number{Name: "ttlSeconds", Min: 0, Max: 1 << 31,
		Why: "an interval added to now(); 68 years is beyond any TTL and far inside interval's range"}
	DelayMs = Number{Name: "delayMs", Min: -(1 << 41), Max: 1 << 41,
		Why: "an interval added to now(); QUEEN_TIMERS_MAX_HORIZON_S bounds it first (403)"}
)

// Check refuses v outside the bounds; path prefixes the name.
func (n Number) Check(path string, v float64) error {
	if v < n.Min || v > n.Max || v != v {
		return &Error{path + n.Name, fmt.Sprintf("must be between %.0f and %.0f", n.Min, n.Max)}
	}
	return nil
}

// Numbers lists every bounded number, for SPEC.
func Numbers() []Number { return []Number{TTLSeconds, DelayMs} }

// Count bounds how many entries one request's array may hold: what a
// request costs (its statement's arrays, its answer, the broker's memory)
// follows its count, which the body's byte bound alone leaves to the
// entries' size (a 64 MiB push of empty items is a million of them).
type Count struct {
	Name string
	Max  int
	Why  string
}

// PushItems bounds a push's items.
var PushItems = Count{Name: "items", Max: 10000,
	Why: "one push is one statement's arrays and an answer of an entry per item; a million items took 2.5 GB"}

// Check refuses n entries past the bound; path prefixes the name. n may be
// max+1 from a reader that stopped there, so the error says "more than".
func (c Count) Check(path string, n int) error {
	if n > c.Max {
		return &Error{path + c.Name, fmt.Sprintf("holds more than %d entries, the limit per request", c.Max)}
	}
	return nil
}

// Counts lists every bounded count, for SPEC.
func Counts() []Count { return []Count{PushItems} }

// Table lists every field, for SPEC and its test.
func Table() []Field {
	return []Field{Queue, Partition, ConsumerGroup, Namespace, Task, TransactionID, TraceID, TraceName, EventType,
		ErrorText, TimerKey, KVNamespace, KVKey, StreamQuery, StreamKey, LeaseID, Status}
}

// Error is a refused field: Field is its full path (e.g. "items[3].queue").
type Error struct {
	Field, Reason string
}

func (e *Error) Error() string { return e.Field + " " + e.Reason }

// Check refuses v when PostgreSQL could not store or index it as f: too
// long, a control character in a name (Queen refuses them: they break logs
// and path routing), NUL anywhere, or not a UUID where one is stored.
// path prefixes the field name in the error (e.g. "items[3].").
func (f Field) Check(path, v string) error {
	return f.CheckAs(path+f.Name, v)
}

// CheckAs is Check with the field's full name given, for a route whose wire
// name differs (a path segment, a snake_case body field).
func (f Field) CheckAs(name, v string) error {
	if canary.On("limits-off") {
		return nil
	}
	if f.UUID {
		if v != "" && !ids.Valid(v) {
			return &Error{name, "must be a UUID"}
		}
		return nil
	}
	if f.Max > 0 && len(v) > f.Max {
		return &Error{name, fmt.Sprintf("is %d bytes, the limit is %d", len(v), f.Max)}
	}
	return f.checkChars(name, v)
}

// MaxKVKeyBytes is the most QUEEN_KV_MAX_KEY_BYTES may be: with a 255-byte
// namespace and the tuple's headers, the kv primary key's row stays under
// btree's 2704 bytes even for incompressible text.
const MaxKVKeyBytes = 2048

// Value is a field and what a client sent for it.
type Value struct {
	Field Field
	V     string
}

// CheckAll checks each value in turn and returns the first refusal.
func CheckAll(path string, vs ...Value) error {
	for _, v := range vs {
		if err := v.Field.Check(path, v.V); err != nil {
			return err
		}
	}
	return nil
}

// Within is Check with the configured bound (QUEEN_KV_MAX_KEY_BYTES) in
// place of the table's.
func (f Field) Within(max int, path, v string) error {
	if max > 0 {
		f.Max = max
	}
	return f.Check(path, v)
}

func (f Field) checkChars(name, v string) error {
	if !utf8.ValidString(v) {
		return &Error{name, "is not valid UTF-8"}
	}
	for _, c := range v {
		switch {
		case c == 0:
			return &Error{name, "must not contain a NUL character"}
		case !f.Text && (c < 0x20 || c == 0x7f):
			return &Error{name, "must not contain control characters"}
		}
	}
	return nil
}

// Text refuses what PostgreSQL's text cannot hold at all, whatever the
// field: invalid UTF-8 and NUL. The HTTP layer applies it to every path and
// query value, so even a read that names nothing writable answers 400, not
// a 500 from a statement's parameter.
func Text(name, v string) error {
	return Field{Text: true}.checkChars(name, v)
}
