package httpapi

import (
	"encoding/json"

	"github.com/queen-go/queen/queen/store"
)

// Typed wire structs of the hot routes (push, pop, ack). A well-formed body
// decodes straight into them; a body they do not fit is re-read by the
// field-by-field parser, whose job is to say which field is wrong.

// pushBody is POST /api/v1/push.
type pushBody struct {
	Items *[]pushItemWire `json:"items"`
}

// ackBatchBody is POST /api/v1/ack/batch (completions with string
// statuses; a boolean status, which JS clients may send, takes the
// field-by-field parser).
type ackBatchBody struct {
	Acknowledgments *[]ackItemWire `json:"acknowledgments"`
	ConsumerGroup   *string        `json:"consumerGroup"`
}

type ackItemWire struct {
	TransactionID *string `json:"transactionId"`
	PartitionID   *string `json:"partitionId"`
	Status        *string `json:"status"`
	LeaseID       *string `json:"leaseId"`
	Error         *string `json:"error"`
}

type pushItemWire struct {
	Queue         *string         `json:"queue"`
	Partition     *string         `json:"partition"`
	TransactionID *string         `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Payload       json.RawMessage `json:"payload"`
	Data          json.RawMessage `json:"data"`
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

func popBody(res store.PopResult) popWire {
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
