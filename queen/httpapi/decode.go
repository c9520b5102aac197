package httpapi

import (
	"bytes"
	"encoding/json"
)

// The one reader of the request bodies the hot routes take (the push body,
// the ack batch, the single ack) and of the push items and
// acknowledgements other routes carry (a transaction's operations, a
// stream cycle's push_items): a hand-written scanner that reads a body in
// one pass into the typed wire structs (wire.go), and notes per object what
// a refusal needs to name the field that is wrong. Two rules for keys and
// values, both kept from before there was one reader (TestWireCorpus
// replays the answers recorded then):
//
//   - encoding/json's, as it decodes the body into the wire structs: a key
//     that is not a field's name but matches one ignoring case
//     (bytes.EqualFold, the Kelvin sign and the long s included) is that
//     field, and a value of another type anywhere refuses the whole body
//     (scan.refused);
//   - the key-by-key rule (scan.exact), which answers a body the first
//     rule refuses, and every object that another route carries: keys
//     matched exactly, the last value of a key counts, and the first field
//     that is wrong is named.
//
// Without a key matched by case alone the two rules read the same values,
// so one pass serves both; a refused body with such a key is read again
// under the second rule. encoding/json decodes only a body whose
// array field comes twice (it decodes the later array into the earlier's
// elements: typedItems, typedAcks), and unquotes each string that holds an
// escape or invalid UTF-8. TestPushDecodersAgree, FuzzPushDecodersAgree and
// FuzzAckBatchParsersAgree hold the first rule to encoding/json on every
// body.

// maxDepth is encoding/json's nesting bound: a body nested deeper is not
// JSON to it.
const maxDepth = 10000

// commonDepth is how deep below its field a value of a common body nests
// (see scan.uncommon).
const commonDepth = 64

// scan walks one body.
type scan struct {
	b     []byte
	i     int
	depth int  // objects and arrays open around the reader
	exact bool // keys matched exactly (the key-by-key rule)
	// max > 0 stops a common body's array at max+1 entries (over): the
	// body is refused for its count, so the rest need not be read.
	max  int
	over bool
	// What a pass learns about the body beside its values.
	refused bool // encoding/json refuses it: a value of another type
	folded  bool // a key matched a field's name only ignoring case
	// uncommon: the body has an escape, invalid UTF-8, U+FFFD, the Kelvin
	// sign or the long s, a key matched by case, a value of another type,
	// an array field that is no array, an entry that is no object, or a
	// value nested deeper than commonDepth below its field. Only a body
	// with none of these up to its (max+1)th item stops there (over): the
	// push decoder that answered before read any other body whole, and a
	// body invalid further on was "Invalid JSON" to it, not too large.
	uncommon bool
	flags    itemFlags // of the array entry being read
}

// itemFlags is what the key-by-key rule needs of one object beyond its
// values: which string fields (bit i: the reader's field i) last held a
// value of another type, and whether the entry was no object at all.
type itemFlags struct {
	wrong     uint8
	notObject bool
}

// list is an array field of a body, read as encoding/json reads it into a
// *[]W: a later key replaces an earlier one, null leaves it absent.
type list[W any] struct {
	items []W
	flags []itemFlags // per item; nil while no item has a flag
	has   bool        // the field's last value is an array
	// merged: an array followed an earlier one, whose elements
	// encoding/json decodes the later's into (field by field).
	merged bool
}

// readList reads the value of an array field into l.
func readList[W pushItemWire | ackItemWire](s *scan, l *list[W]) bool {
	s.space()
	if !s.take('[') {
		s.uncommon = true
		l.items, l.flags, l.has = nil, nil, false
		if s.literal("null") {
			return true
		}
		s.refused = true
		return s.skip(0)
	}
	if !s.enter() {
		return false
	}
	l.merged = l.merged || l.has
	l.items, l.flags, l.has = make([]W, 0, 8), nil, true
	s.space()
	if s.take(']') {
		s.depth--
		return true
	}
	var zero W
	for {
		l.items, s.flags = append(l.items, zero), itemFlags{}
		if !readEntry(s, &l.items[len(l.items)-1]) {
			return false
		}
		if f := s.flags; f != (itemFlags{}) || l.flags != nil {
			l.flags = append(l.flags, make([]itemFlags, len(l.items)-len(l.flags))...)
			l.flags[len(l.items)-1] = f
		}
		if s.max > 0 && len(l.items) > s.max && !s.uncommon {
			s.over = true
			return false
		}
		if done, ok := s.nextElement(); done || !ok {
			return done
		}
	}
}

// readEntry reads one entry of an array field into w, its flags into
// s.flags. (A call through a func value would make s escape.)
func readEntry[W pushItemWire | ackItemWire](s *scan, w *W) bool {
	switch w := any(w).(type) {
	case *pushItemWire:
		return pushItem(s, w, &s.flags)
	case *ackItemWire:
		return ackItem(s, w, &s.flags, nil)
	}
	return false
}

// flag returns item i's flags.
func (l *list[W]) flag(i int) itemFlags {
	if i < len(l.flags) {
		return l.flags[i]
	}
	return itemFlags{}
}

// scanBody reads a body object: the array field names[0] into l, the
// string field names[1] (if any) into group, any other key skipped.
func scanBody[W pushItemWire | ackItemWire](s *scan, l *list[W], names []string, group *wireString, gf *itemFlags) bool {
	s.space()
	if !s.take('{') || !s.enter() {
		return false
	}
	for first := true; ; first = false {
		key, plain, more, ok := s.key(first)
		if !ok || !more {
			s.space()
			return ok && s.i == len(s.b)
		}
		switch s.match(key, plain, names) {
		case 0:
			ok = readList(s, l)
		case 1:
			ok = s.wireString(group, gf, 0)
		default:
			ok = s.skip(0)
		}
		if !ok {
			return false
		}
	}
}

// element starts an array entry that should be an object and reports
// whether one opened; any other value is read whole and flagged (null is
// a zero struct to encoding/json, another value a refusal; neither is an
// object to the key-by-key rule).
func (s *scan) element(f *itemFlags) (isObject, ok bool) {
	s.space()
	if s.take('{') {
		return true, s.enter()
	}
	f.notObject = true
	s.uncommon = true
	if s.literal("null") {
		return false, true
	}
	s.refused = true
	return false, s.skip(0)
}

// pushFields are the push item's keys, in pushItemWire's order.
var pushFields = []string{"queue", "partition", "transactionId", "traceId", "payload", "data"}

// pushItem reads one entry of a push's items into w.
func pushItem(s *scan, w *pushItemWire, f *itemFlags) bool {
	if isObject, ok := s.element(f); !isObject || !ok {
		return ok
	}
	for first := true; ; first = false {
		key, plain, more, ok := s.key(first)
		if !ok || !more {
			return ok
		}
		switch s.pushField(key, plain) {
		case 0:
			ok = s.wireString(&w.Queue, f, 0)
		case 1:
			ok = s.wireString(&w.Partition, f, 1)
		case 2:
			ok = s.wireString(&w.TransactionID, f, 2)
		case 3:
			ok = s.wireString(&w.TraceID, f, 3)
		case 4:
			w.Payload, ok = s.raw()
		case 5:
			w.Data, ok = s.raw()
		default:
			ok = s.skip(0)
		}
		if !ok {
			return false
		}
	}
}

// pushField is match for the push item's keys, the common ones without a
// loop.
func (s *scan) pushField(key []byte, plain bool) int {
	if plain {
		switch string(key) {
		case "queue":
			return 0
		case "partition":
			return 1
		case "transactionId":
			return 2
		case "traceId":
			return 3
		case "payload":
			return 4
		case "data":
			return 5
		}
	}
	return s.match(key, plain, pushFields)
}

// ackFields are an acknowledgement's keys, in ackItemWire's order, then
// the consumerGroup that the single ack and a transaction's ack operation
// carry beside them.
var ackFields = []string{"transactionId", "partitionId", "status", "leaseId", "error", "consumerGroup"}

// ackItem reads one acknowledgement into w; a non-nil group takes the
// object's consumerGroup (flag bit 5), else that key is foreign.
func ackItem(s *scan, w *ackItemWire, f *itemFlags, group *wireString) bool {
	names := ackFields[:5]
	if group != nil {
		names = ackFields
	}
	if isObject, ok := s.element(f); !isObject || !ok {
		return ok
	}
	for first := true; ; first = false {
		key, plain, more, ok := s.key(first)
		if !ok || !more {
			return ok
		}
		switch i := s.match(key, plain, names); i {
		case -1:
			ok = s.skip(0)
		case 2:
			ok = s.status(&w.Status, f)
		case 5:
			ok = s.wireString(group, f, 5)
		default:
			ok = s.wireString(w.field(i), f, i)
		}
		if !ok {
			return false
		}
	}
}

// field returns the string field of index i in ackFields.
func (w *ackItemWire) field(i int) *wireString {
	return [...]*wireString{&w.TransactionID, &w.PartitionID, &w.Status, &w.LeaseID, &w.Error}[i]
}

// status reads an acknowledgement's status: a string, null, or (from JS
// clients, to the key-by-key rule only) true for completed, false for
// failed.
func (s *scan) status(dst *wireString, f *itemFlags) bool {
	s.space()
	for _, b := range [...]struct {
		lit, status string
	}{{"true", "completed"}, {"false", "failed"}} {
		if s.literal(b.lit) {
			*dst, f.wrong = wireString(b.status), f.wrong&^(1<<2)
			s.refused, s.uncommon = true, true
			return true
		}
	}
	return s.wireString(dst, f, 2)
}

// match returns the index in names of the name key stands for, or -1: the
// name spelled exactly, else (unless exact) one that matches it ignoring
// case, as encoding/json matches a struct's fields. key is plain (its own
// text) or else a string token to unquote.
func (s *scan) match(key []byte, plain bool, names []string) int {
	if !plain {
		key = []byte(unquote(key))
	}
	for i, n := range names {
		if string(key) == n {
			return i
		}
	}
	if s.exact {
		return -1
	}
	for i, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			s.folded, s.uncommon = true, true
			return i
		}
	}
	return -1
}

// wireString reads a string field's value into dst: a string or null
// (which replaces an earlier value, as wireString.UnmarshalJSON does). A
// value of another type leaves it "" and sets the field's flag bit.
func (s *scan) wireString(dst *wireString, f *itemFlags, bit int) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '"' {
		tok, plain, ok := s.str()
		if plain {
			*dst = wireString(tok)
		} else {
			*dst = wireString(unquote(tok))
		}
		f.wrong &^= 1 << bit
		return ok
	}
	*dst = ""
	if s.literal("null") {
		f.wrong &^= 1 << bit
		return true
	}
	f.wrong |= 1 << bit
	s.refused, s.uncommon = true, true
	return s.skip(0)
}

// raw reads any JSON value, kept as sent (a payload).
func (s *scan) raw() (json.RawMessage, bool) {
	s.space()
	start := s.i
	if !s.skip(0) {
		return nil, false
	}
	return append(json.RawMessage(nil), s.b[start:s.i]...), true
}

// unquote decodes a string token (quotes and all) that holds an escape or
// invalid UTF-8, as encoding/json does (U+FFFD for each bad byte or lone
// surrogate). The scanner has checked its syntax.
func unquote(tok []byte) string {
	var v string
	_ = json.Unmarshal(tok, &v)
	return v
}
