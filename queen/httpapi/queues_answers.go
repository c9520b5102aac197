package httpapi

import (
	"encoding/json"
	"time"

	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/store"
)

// The answers of the queue resource routes (queues.go): configure, the
// queue list and detail, depth, delete, overview and the dead-letter list.

// configureAnswer is POST /api/v1/configure's answer: the queue as it now
// stands.
type configureAnswer struct {
	Configured  bool               `json:"configured"` // always true
	QueueID     string             `json:"queueId"`
	PartitionID string             `json:"partitionId"` // the queue's Default partition
	Queue       string             `json:"queue"`
	Namespace   *string            `json:"namespace"` // null when the queue has none
	Task        *string            `json:"task"`      // null when the queue has none
	Options     store.QueueOptions `json:"options"`
}

// queueResource is one queue of GET /api/v1/resources/queues.
type queueResource struct {
	ID             string                `json:"id"`
	Name           string                `json:"name"`
	Namespace      *string               `json:"namespace"` // null when the queue has none
	Task           *string               `json:"task"`      // null when the queue has none
	Priority       int                   `json:"priority"`
	CreatedAt      string                `json:"createdAt"`
	Partitions     int                   `json:"partitions"` // a count here; the detail lists them
	PartitionCount int                   `json:"partitionCount"`
	Messages       queueResourceMessages `json:"messages"`
	Options        store.QueueOptions    `json:"options"`
	// queenctl's queue list reads these four at the top level; they
	// repeat Options.
	LeaseTime         int  `json:"leaseTime"`
	RetryLimit        int  `json:"retryLimit"`
	MaxSize           int  `json:"maxSize"`
	EncryptionEnabled bool `json:"encryptionEnabled"`
}

// queueResourceMessages counts a queue's messages in the queue list.
type queueResourceMessages struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`    // not yet consumed in queue mode
	Processing int64 `json:"processing"` // under a live queue-mode lease
	DLQ        int64 `json:"dlq"`        // dead-lettered by any group
}

// queueResourceDetail is GET /api/v1/resources/queues/{queue}: the list's
// row with its partitions listed and their totals. Partitions here shadows
// the row's count (encoding/json takes the shallower field).
type queueResourceDetail struct {
	queueResource
	Partitions []partitionResource `json:"partitions"`
	Totals     stateCounts         `json:"totals"`
}

// partitionResource is one partition of a queue's detail.
type partitionResource struct {
	ID            string                    `json:"id"`
	Name          string                    `json:"name"`
	CreatedAt     string                    `json:"createdAt"`
	Stats         stateCounts               `json:"stats"`
	OldestMessage *string                   `json:"oldestMessage"` // null when the partition holds none
	NewestMessage *string                   `json:"newestMessage"` // the last push; null before any
	LastMessageAt *string                   `json:"lastMessageAt"` // the same instant as NewestMessage
	Messages      partitionResourceMessages `json:"messages"`
}

// partitionResourceMessages counts a partition's messages in a queue's
// detail.
type partitionResourceMessages struct {
	Total   int64 `json:"total"`
	Pending int64 `json:"pending"`
}

// stateCounts are messages by state, as the admin views show them.
type stateCounts struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	// Completed is what is neither pending nor dead-lettered (never
	// below zero).
	Completed  int64 `json:"completed"`
	Failed     int   `json:"failed"` // always 0: failures are retried or dead-lettered
	DeadLetter int64 `json:"deadLetter"`
}

// completedOf is the one definition of completed that every answer
// counting messages uses (overview, status, the queue lists and detail,
// worker metrics; SPEC "Message counts"): of total stored messages, those
// that are not pending (no group has reached them yet: past each
// partition's furthest cursor) and that the group furthest along did not
// dead-letter (furthestDLQ). Never below zero.
func completedOf(total, pending, furthestDLQ int64) int64 {
	return max(total-pending-furthestDLQ, 0)
}

// queueList is GET /api/v1/resources/queues's answer.
type queueList struct {
	Queues []queueResource `json:"queues"`
	Total  int             `json:"total"` // the length of this page
}

// queueDepthAnswer is GET /api/v1/resources/queues/{queue}/depth's answer:
// the backlog for a group (or the queue as a whole) and by partition.
type queueDepthAnswer struct {
	Queue             string           `json:"queue"`
	Group             *string          `json:"group"` // null: the queue as a whole
	Pending           int64            `json:"pending"`
	Processing        int64            `json:"processing"`
	Ready             int64            `json:"ready"`
	PartitionsPending int64            `json:"partitionsPending"` // partitions with a pending message
	PartitionsReady   int64            `json:"partitionsReady"`   // partitions with a ready message
	Conflation        bool             `json:"conflation"`        // always false: the effective figures are the plain ones
	EffectivePending  int64            `json:"effectivePending"`
	EffectiveReady    int64            `json:"effectiveReady"`
	Partitions        []partitionDepth `json:"partitions"`
}

// partitionDepth is one partition's backlog in queueDepthAnswer.
type partitionDepth struct {
	Partition  string `json:"partition"`
	Pending    int64  `json:"pending"`
	Processing int64  `json:"processing"`
	Ready      int64  `json:"ready"`
}

// queueDeleted is DELETE /api/v1/resources/queues/{queue}'s answer.
type queueDeleted struct {
	Deleted bool   `json:"deleted"`
	Queue   string `json:"queue"`
	Existed bool   `json:"existed"`           // the same as Deleted
	Message string `json:"message,omitempty"` // only when there was no such queue
}

// overviewAnswer is GET /api/v1/resources/overview's answer
// (contract-admin.md 4.6).
type overviewAnswer struct {
	Queues         int64              `json:"queues"`
	Partitions     int64              `json:"partitions"`
	Namespaces     int                `json:"namespaces"` // len(NamespaceNames)
	Tasks          int                `json:"tasks"`      // len(TaskNames)
	NamespaceNames []string           `json:"namespaceNames"`
	TaskNames      []string           `json:"taskNames"`
	Messages       stateCounts        `json:"messages"`
	Lag            overviewLag        `json:"lag"`
	Throughput     overviewThroughput `json:"throughput"`
	ActiveLeases   int64              `json:"activeLeases"`
	Timestamp      string             `json:"timestamp"` // when it was computed
	StatsAge       int                `json:"statsAge"`  // always 0: computed on every read
}

// overviewLag spreads the lag over every cursor with messages past it.
type overviewLag struct {
	Time   lagSpread `json:"time"`   // seconds
	Offset lagSpread `json:"offset"` // messages
}

// lagSpread is store.Spread on the wire.
type lagSpread struct {
	Avg    float64 `json:"avg"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// overviewThroughput is messages per second over the last closed minutes
// (recentThroughput): pushed, and completed (acked or auto-acked).
type overviewThroughput struct {
	IngestedPerSecond  float64 `json:"ingestedPerSecond"`
	ProcessedPerSecond float64 `json:"processedPerSecond"`
}

// dlqPage is GET /api/v1/dlq's answer: one page of dead letters.
type dlqPage struct {
	Messages   []dlqMessage  `json:"messages"`
	Total      int64         `json:"total"` // every match, not only this page
	Pagination dlqPagination `json:"pagination"`
}

// dlqMessage is one dead letter.
type dlqMessage struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	ConsumerGroup string          `json:"consumerGroup"`
	ErrorMessage  *string         `json:"errorMessage"`
	RetryCount    int             `json:"retryCount"`
	Data          json.RawMessage `json:"data"` // null when stored without a payload
	ProducerSub   *string         `json:"producerSub"`
	CreatedAt     string          `json:"createdAt"`
	FailedAt      string          `json:"failedAt"`
}

// dlqPagination says which page dlqPage is: Limit is the one used (the
// asked one clamped).
type dlqPagination struct {
	Limit  int   `json:"limit"`
	Offset int   `json:"offset"`
	Total  int64 `json:"total"`
}

// timestampOrNull is timestamp(*t), or null when t is nil.
func timestampOrNull(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := timestamp(*t)
	return &s
}

func newQueueResource(q store.QueueInfo) queueResource {
	return queueResource{
		ID: q.ID, Name: q.Name, Namespace: strPtr(q.Namespace), Task: strPtr(q.Task),
		Priority: q.Options.Priority, CreatedAt: timestamp(q.CreatedAt),
		Partitions: q.PartitionCount, PartitionCount: q.PartitionCount,
		Messages: queueResourceMessages{Total: q.Messages, Pending: q.Pending, Processing: q.Processing, DLQ: q.DLQ},
		Options:  q.Options, LeaseTime: q.Options.LeaseTime, RetryLimit: q.Options.RetryLimit,
		MaxSize: q.Options.MaxSize, EncryptionEnabled: q.Options.EncryptionEnabled,
	}
}

func newQueueResourceDetail(q store.QueueInfo) queueResourceDetail {
	d := queueResourceDetail{queueResource: newQueueResource(q), Partitions: make([]partitionResource, len(q.Partitions)),
		Totals: stateCounts{Total: q.Messages, Pending: q.Pending, Processing: q.Processing,
			Completed: completedOf(q.Messages, q.Pending, q.QueueDLQ), DeadLetter: q.DLQ}}
	for i, p := range q.Partitions {
		d.Partitions[i] = partitionResource{
			ID: p.ID, Name: p.Name, CreatedAt: timestamp(p.CreatedAt),
			Stats: stateCounts{Total: p.Messages, Pending: p.Pending, Processing: p.Processing,
				Completed: completedOf(p.Messages, p.Pending, p.QueueDLQ), DeadLetter: p.DLQ},
			OldestMessage: timestampOrNull(p.OldestAt), NewestMessage: timestampOrNull(p.LastMessageAt),
			LastMessageAt: timestampOrNull(p.LastMessageAt),
			Messages:      partitionResourceMessages{Total: p.Messages, Pending: p.Pending},
		}
	}
	return d
}

func newLagSpread(v store.Spread) lagSpread {
	return lagSpread{Avg: v.Avg, Median: v.Median, Min: v.Min, Max: v.Max}
}

// newDLQMessage is e's answer, its payload opened with c.
func newDLQMessage(e store.DLQEntry, c *crypt.Cipher) dlqMessage {
	return dlqMessage{
		ID: e.ID, TransactionID: e.TransactionID, PartitionID: e.PartitionID, Queue: e.Queue,
		Partition: e.Partition, ConsumerGroup: e.ConsumerGroup, ErrorMessage: e.ErrorMessage,
		RetryCount: e.RetryCount, Data: c.Reveal(e.Data), ProducerSub: e.ProducerSub,
		CreatedAt: timestamp(e.CreatedAt), FailedAt: timestamp(e.FailedAt),
	}
}
