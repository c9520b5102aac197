package httpapi

import (
	"encoding/json"

	"github.com/queen-go/queen/queen/store"
)

// The answers of the /api/v1/traces routes (contract-admin.md section 5).
// Keys are snake_case, as Queen answers; the camelCase twins serve
// queenctl, which reads those.

// traceRecorded is the 201 answer to POST /api/v1/traces.
type traceRecorded struct {
	Success bool   `json:"success"` // always true
	TraceID string `json:"traceId"`
}

// traceWire is one recorded trace.
type traceWire struct {
	ID             string          `json:"id"`
	EventTypeSnake string          `json:"event_type"`
	EventType      string          `json:"eventType"`
	Data           json.RawMessage `json:"data"`
	ConsumerGroup  string          `json:"consumer_group"`
	WorkerID       *string         `json:"worker_id"` // null when the recording broker had no id
	CreatedAtSnake string          `json:"created_at"`
	CreatedAt      string          `json:"createdAt"`
	TraceNames     []string        `json:"trace_names"` // never null
	TraceName      *string         `json:"traceName"`   // the first name, null without: queenctl shows one per trace
}

func newTraceWire(t store.Trace) traceWire {
	names := t.Names
	if names == nil {
		names = []string{}
	}
	var first *string
	if len(names) > 0 {
		first = &names[0]
	}
	at := msStamp(t.CreatedAt)
	return traceWire{ID: t.ID, EventTypeSnake: t.EventType, EventType: t.EventType, Data: t.Data,
		ConsumerGroup: t.ConsumerGroup, WorkerID: strPtr(t.WorkerID), CreatedAtSnake: at, CreatedAt: at,
		TraceNames: names, TraceName: first}
}

// tracesOfMessageAnswer is the answer of GET /api/v1/traces/{partitionId}/{transactionId}.
type tracesOfMessageAnswer struct {
	Traces []traceWire `json:"traces"`
}

// traceOfNameWire is a trace found by name, with its message.
type traceOfNameWire struct {
	traceWire
	TransactionIDSnake string          `json:"transaction_id"`
	PartitionID        string          `json:"partition_id"`
	QueueName          string          `json:"queue_name"`
	PartitionName      string          `json:"partition_name"`
	TransactionID      string          `json:"transactionId"` // queenctl's traces by-name
	Partition          string          `json:"partition"`     // queenctl's traces by-name: the name
	MessagePayload     json.RawMessage `json:"message_payload"`
}

func newTraceOfNameWire(t store.Trace) traceOfNameWire {
	return traceOfNameWire{traceWire: newTraceWire(t), TransactionIDSnake: t.TransactionID, PartitionID: t.PartitionID,
		QueueName: t.QueueName, PartitionName: t.PartitionName, TransactionID: t.TransactionID,
		Partition: t.PartitionName, MessagePayload: t.MessagePayload}
}

// tracePage is the page a trace list answers, as used (limit clamped).
type tracePage struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// tracesByNameAnswer is the answer of GET /api/v1/traces/by-name/{traceName}.
type tracesByNameAnswer struct {
	Traces     []traceOfNameWire `json:"traces"`
	Total      int64             `json:"total"` // over all pages
	Pagination tracePage         `json:"pagination"`
}

// traceNameWire is one trace name's summary.
type traceNameWire struct {
	TraceNameSnake string `json:"trace_name"`
	TraceCount     int64  `json:"trace_count"`
	MessageCount   int64  `json:"message_count"` // distinct messages traced under the name
	LastSeenSnake  string `json:"last_seen"`
	Name           string `json:"name"`  // queenctl's traces names
	Count          int64  `json:"count"` // queenctl's: the trace count
	LastSeen       string `json:"lastSeen"`
}

// traceNamesAnswer is the answer of GET /api/v1/traces/names. The same
// rows are under both keys: trace_names for Queen's clients, names for
// queenctl.
type traceNamesAnswer struct {
	TraceNames []traceNameWire `json:"trace_names"`
	Names      []traceNameWire `json:"names"`
	Total      int64           `json:"total"` // over all pages
	Pagination tracePage       `json:"pagination"`
}
