package httpapi

import (
	"net/http"
	"strconv"
	"unicode/utf8"
)

// Hand-written encoders for the hot answers (pop, push, ack). encoding/json reaches a
// struct's fields by reflection and compacts every json.RawMessage it
// writes (a pop's payload twice, as data and as payload); these append the
// same document, field for field, and compact a payload once. The output
// decodes to what encoding/json's would (TestEncodersMatchEncodingJSON);
// only the escaping of <, > and & outside payloads differs.

// appendJSON appends the pop answer.
func (p popWire) appendJSON(b []byte) []byte {
	b = p.appendHead(b)
	if p.Messages == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, m := range p.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			b = m.appendJSON(b)
		}
		b = append(b, ']')
	}
	return p.appendTail(b)
}

// popChunk is how much of a pop answer is gathered before it is written:
// big enough that a batch of small messages is a few writes, small next to
// an answer of big ones.
const popChunk = 64 << 10

// writePop streams the pop answer (a 200), a message at a time, so what the
// broker holds for it is one message's encoding (its payload compacted
// once, then copied as data and as payload) and a chunk, never the whole
// answer again beside the claimed messages. The error is the first write's.
func writePop(w http.ResponseWriter, p popWire) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	b := p.appendHead(make([]byte, 0, min(popChunk, 1024+768*len(p.Messages))))
	b = append(b, '[')
	for i, m := range p.Messages {
		if i > 0 {
			b = append(b, ',')
		}
		b = m.appendJSON(b)
		if len(b) >= popChunk {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = append(p.appendTail(append(b, ']')), '\n')
	_, err := w.Write(b)
	return err
}

// appendHead appends the pop answer up to its messages.
func (p popWire) appendHead(b []byte) []byte {
	b = append(b, `{"success":`...)
	b = strconv.AppendBool(b, p.Success)
	b = appendField(b, "queue", p.Queue)
	b = appendField(b, "partition", p.Partition)
	b = appendField(b, "partitionId", p.PartitionID)
	b = appendField(b, "leaseId", p.LeaseID)
	b = appendField(b, "consumerGroup", p.ConsumerGroup)
	return append(b, `,"messages":`...)
}

// appendTail appends the pop answer after its messages.
func (p popWire) appendTail(b []byte) []byte {
	b = append(b, `,"partitionsClaimed":`...)
	b = strconv.AppendInt(b, int64(p.PartitionsClaimed), 10)
	if p.Autopilot != nil {
		b = append(b, `,"autopilot":{"partitions":`...)
		b = strconv.AppendInt(b, int64(p.Autopilot.Partitions), 10)
		b = append(b, `,"batch":`...)
		b = strconv.AppendInt(b, int64(p.Autopilot.Batch), 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendJSON appends one delivered message.
func (m messageWire) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, m.ID)
	b = appendField(b, "transactionId", m.TransactionID)
	b = appendOptional(b, "traceId", m.TraceID)
	b = append(b, `,"data":`...)
	at := len(b)
	b = appendCompact(b, m.Data)
	if string(m.Payload) == string(m.Data) {
		// The same payload under both names (every pop): compacted once.
		b = append(b, `,"payload":`...)
		b = append(b, b[at:len(b)-len(`,"payload":`)]...)
	} else {
		b = append(b, `,"payload":`...)
		b = appendCompact(b, m.Payload)
	}
	b = appendOptional(b, "producerSub", m.ProducerSub)
	b = appendField(b, "createdAt", m.CreatedAt)
	b = appendField(b, "partitionId", m.PartitionID)
	b = appendField(b, "partition", m.Partition)
	b = appendField(b, "queue", m.Queue)
	b = appendField(b, "leaseId", m.LeaseID)
	b = appendField(b, "consumerGroup", m.ConsumerGroup)
	b = append(b, `,"retryCount":`...)
	b = strconv.AppendInt(b, int64(m.RetryCount), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, m.Offset, 10)
	return append(b, '}')
}

// appendField appends ,"name":"value".
func appendField(b []byte, name, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, v)
}

// appendOptional appends ,"name":"value", or null for nil.
func appendOptional(b []byte, name string, v *string) []byte {
	if v == nil {
		b = append(b, ',', '"')
		b = append(b, name...)
		return append(b, `":null`...)
	}
	return appendField(b, name, *v)
}

// appendCompact appends a stored payload without its insignificant
// whitespace (jsonb writes `{"n": 1}`), or null for none. The payload is
// JSON (jsonb's text, or a sealed payload opened, which was JSON when it
// was pushed), so whitespace outside strings is all that goes: one pass
// that only tracks whether it is inside a string.
func appendCompact(b []byte, raw []byte) []byte {
	if len(raw) == 0 {
		return append(b, "null"...)
	}
	inString, escaped := false, false
	start := 0
	for i, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			b = append(b, raw[start:i]...)
			start = i + 1
		}
	}
	return append(b, raw[start:]...)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD as encoding/json does.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// writeJSONBytes answers status with an encoded JSON document, ending in
// a newline as json.Encoder's do.
func writeJSONBytes(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// appendResults appends one object per result, each opened with its
// "index", as a JSON array; fields appends the rest of one.
func appendResults[T any](b []byte, out []T, index func(T) int, fields func([]byte, T) []byte) []byte {
	b = append(b, '[')
	for i, r := range out {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(index(r)), 10)
		b = fields(b, r)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendPushResults appends the push answer: one result per item.
func appendPushResults(b []byte, out []pushResultWire) []byte {
	return appendResults(b, out, func(r pushResultWire) int { return r.Index }, func(b []byte, r pushResultWire) []byte {
		b = appendField(b, "status", r.Status)
		b = appendField(b, "queueName", r.QueueName)
		b = appendField(b, "transaction_id", r.TransactionIDSnake)
		b = appendField(b, "transactionId", r.TransactionID)
		b = appendField(b, "message_id", r.MessageIDSnake)
		b = appendField(b, "messageId", r.MessageID)
		b = appendField(b, "partition_id", r.PartitionIDSnake)
		b = appendField(b, "partitionId", r.PartitionID)
		b = appendOptional(b, "trace_id", r.TraceIDSnake)
		return appendOptional(b, "traceId", r.TraceID)
	})
}

// appendAckResults appends the ack answer: one result per item.
func appendAckResults(b []byte, out []ackResultWire) []byte {
	return appendResults(b, out, func(r ackResultWire) int { return r.Index }, func(b []byte, r ackResultWire) []byte {
		b = appendField(b, "transactionId", r.TransactionID)
		b = append(b, `,"success":`...)
		b = strconv.AppendBool(b, r.Success)
		b = appendOptional(b, "error", r.Error)
		b = appendOptional(b, "queueName", r.QueueName)
		b = appendOptional(b, "partitionName", r.PartitionName)
		b = append(b, `,"leaseReleased":`...)
		b = strconv.AppendBool(b, r.LeaseReleased)
		b = append(b, `,"dlq":`...)
		return strconv.AppendBool(b, r.DLQ)
	})
}
