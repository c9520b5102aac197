package httpapi

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/queen-go/queen/queen/consume"
	"github.com/queen-go/queen/queen/store"
)

// Typed wire structs of the hot routes (push, pop, ack). The requests' are
// read by one hand-written scanner (decode.go), which also names the field
// that is wrong; encoding/json decodes into them only a body whose array
// field comes twice. The one check of an item (pushItemWire.item,
// ackItemWire.item) names the field that breaks a rule.

// pushBody is POST /api/v1/push.
type pushBody struct {
	Items *[]pushItemWire `json:"items"`
}

// ackBatchBody is POST /api/v1/ack/batch (completions with string
// statuses; a boolean status, which JS clients may send, makes the body
// one that encoding/json refuses and the key-by-key rule reads).
type ackBatchBody struct {
	Acknowledgments *[]ackItemWire `json:"acknowledgments"`
	ConsumerGroup   wireString     `json:"consumerGroup"`
}

type ackItemWire struct {
	TransactionID wireString `json:"transactionId"`
	PartitionID   wireString `json:"partitionId"`
	Status        wireString `json:"status"`
	LeaseID       wireString `json:"leaseId"`
	Error         wireString `json:"error"`
}

type pushItemWire struct {
	Queue         wireString      `json:"queue"`
	Partition     wireString      `json:"partition"`
	TransactionID wireString      `json:"transactionId"`
	TraceID       wireString      `json:"traceId"`
	Payload       json.RawMessage `json:"payload"`
	Data          json.RawMessage `json:"data"`
}

// wireString is a string field of a request body. null reads as absent,
// "" (no field tells the two apart); a value of another type makes
// encoding/json refuse the body, and the scanner flags the field for the
// check to answer that it must be a string.
type wireString string

// UnmarshalJSON takes a string or null; a later duplicate key replaces an
// earlier one, null included, as it does for a *string. encoding/json hands
// it a value it has already checked, so a string of valid UTF-8 without an
// escape is its own bytes between the quotes (as encoding/json would read
// it; this saves a second decoder per field).
func (s *wireString) UnmarshalJSON(b []byte) error {
	*s = ""
	switch {
	case string(b) == "null":
		return nil
	case len(b) >= 2 && b[0] == '"' && bytes.IndexByte(b, '\\') < 0 && utf8.Valid(b):
		*s = wireString(b[1 : len(b)-1])
		return nil
	}
	return json.Unmarshal(b, (*string)(s))
}

// pushResultWire is one item of the push answer; Queen's clients read
// either spelling of the ids.
type pushResultWire struct {
	Index              int     `json:"index"`
	Status             string  `json:"status"`
	QueueName          string  `json:"queueName"`
	TransactionIDSnake string  `json:"transaction_id"`
	TransactionID      string  `json:"transactionId"`
	MessageIDSnake     string  `json:"message_id"`
	MessageID          string  `json:"messageId"`
	PartitionIDSnake   string  `json:"partition_id"`
	PartitionID        string  `json:"partitionId"`
	TraceIDSnake       *string `json:"trace_id"`
	TraceID            *string `json:"traceId"`
}

func pushResults(results []store.PushResult) []pushResultWire {
	out := make([]pushResultWire, len(results))
	for i, r := range results {
		trace := strPtr(r.TraceID)
		out[i] = pushResultWire{Index: r.Index, Status: r.Status, QueueName: r.QueueName,
			TransactionIDSnake: r.TransactionID, TransactionID: r.TransactionID,
			MessageIDSnake: r.MessageID, MessageID: r.MessageID,
			PartitionIDSnake: r.PartitionID, PartitionID: r.PartitionID,
			TraceIDSnake: trace, TraceID: trace}
	}
	return out
}

// popWire is the pop answer.
type popWire struct {
	Success           bool           `json:"success"`
	Queue             string         `json:"queue"`
	Partition         string         `json:"partition"`
	PartitionID       string         `json:"partitionId"`
	LeaseID           string         `json:"leaseId"`
	ConsumerGroup     string         `json:"consumerGroup"`
	Messages          []messageWire  `json:"messages"`
	PartitionsClaimed int            `json:"partitionsClaimed"`
	Autopilot         *autopilotWire `json:"autopilot,omitempty"`
}

// autopilotWire tells a client that engaged autopilot the sizes its pop
// was given.
type autopilotWire struct {
	Partitions int `json:"partitions"`
	Batch      int `json:"batch"`
}

type messageWire struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Data          json.RawMessage `json:"data"`
	Payload       json.RawMessage `json:"payload"`
	ProducerSub   *string         `json:"producerSub"`
	CreatedAt     string          `json:"createdAt"`
	PartitionID   string          `json:"partitionId"`
	Partition     string          `json:"partition"`
	Queue         string          `json:"queue"`
	LeaseID       string          `json:"leaseId"`
	ConsumerGroup string          `json:"consumerGroup"`
	RetryCount    int             `json:"retryCount"`
	Offset        int64           `json:"offset"`
}

func popBody(res consume.PopResult) popWire {
	msgs := make([]messageWire, len(res.Messages))
	for i, m := range res.Messages {
		msgs[i] = messageWire{ID: m.ID, TransactionID: m.TransactionID, TraceID: m.TraceID, Data: m.Data,
			Payload: m.Data, ProducerSub: m.ProducerSub, CreatedAt: timestamp(m.CreatedAt), PartitionID: m.PartitionID,
			Partition: m.Partition, Queue: m.Queue, LeaseID: m.LeaseID, ConsumerGroup: m.ConsumerGroup,
			RetryCount: m.RetryCount, Offset: m.Seq}
	}
	return popWire{Success: true, Queue: res.Queue, Partition: res.Partition, PartitionID: res.PartitionID,
		LeaseID: res.LeaseID, ConsumerGroup: res.Group, Messages: msgs, PartitionsClaimed: res.PartitionsClaimed}
}

// ackResultWire is one item of the ack answer.
type ackResultWire struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	QueueName     *string `json:"queueName"`
	PartitionName *string `json:"partitionName"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
