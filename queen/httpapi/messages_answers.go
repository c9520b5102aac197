package httpapi

import (
	"encoding/json"

	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/store"
)

// Answers of the message routes (contract-admin.md section 3).

// consumptionMode is how a queue is consumed: by its queue-mode group, by
// bus (consumer) groups, by both or by neither.
type consumptionMode struct {
	HasQueueMode   bool   `json:"hasQueueMode"`
	BusGroupsCount int    `json:"busGroupsCount"`
	Type           string `json:"type"` // "queue", "bus", "hybrid" or "none"
}

// messageMode is one message's consumptionMode and how many bus groups
// have consumed it.
type messageMode struct {
	consumptionMode
	ConsumedByGroups int `json:"consumedByGroups"`
}

// busStatus is how far the bus groups got with one message.
type busStatus struct {
	ConsumedBy  int `json:"consumedBy"`
	TotalGroups int `json:"totalGroups"`
}

// messageRow is one message as GET /api/v1/messages lists it.
type messageRow struct {
	ID            string    `json:"id"`
	TransactionID string    `json:"transactionId"`
	PartitionID   string    `json:"partitionId"`
	QueuePath     string    `json:"queuePath"` // queue/partition
	Queue         string    `json:"queue"`
	Partition     string    `json:"partition"`
	Namespace     *string   `json:"namespace"` // null: the queue has none
	Task          *string   `json:"task"`      // null: the queue has none
	Status        string    `json:"status"`
	QueueStatus   string    `json:"queueStatus"` // as the queue-mode group sees it
	BusStatus     busStatus `json:"busStatus"`
	TraceID       *string   `json:"traceId"`
	ProducerSub   *string   `json:"producerSub"` // the pushing token's sub
	QueuePriority int       `json:"queuePriority"`
	CreatedAt     string    `json:"createdAt"`
	// LeaseExpiresAt is the queue-mode lease's end while it is live, else
	// null.
	LeaseExpiresAt *string `json:"leaseExpiresAt"`
	RetryCount     int     `json:"retryCount"`
}

// messageList is GET /api/v1/messages (and a queue's messages under
// /api/v1/status/queues).
type messageList struct {
	Messages []messageRow    `json:"messages"`
	Mode     consumptionMode `json:"mode"`
	Total    int             `json:"total"` // of this page
}

// messagesFound is GET /api/v1/messages/by-transaction: the messages with
// one transactionId, newest first, at most Limit of them.
type messagesFound struct {
	TransactionID string       `json:"transactionId"`
	Messages      []messageRow `json:"messages"`
	Limit         int          `json:"limit"`
}

// messageDetail is GET /api/v1/messages/{partitionId}/{transactionId}.
type messageDetail struct {
	messageRow
	// RetryCount shadows the row's: the dead-letter row's count, null
	// when the message is not dead-lettered.
	RetryCount     *int               `json:"retryCount"`
	Payload        json.RawMessage    `json:"payload"`
	Data           json.RawMessage    `json:"data"` // the payload again, under Queen's other name
	IsEncrypted    bool               `json:"isEncrypted"`
	ErrorMessage   *string            `json:"errorMessage"` // the dead-letter reason
	QueueConfig    messageQueueConfig `json:"queueConfig"`
	Mode           messageMode        `json:"mode"`
	ConsumerGroups []messageGroup     `json:"consumerGroups"`
}

// messageQueueConfig is the part of the queue's options a message view
// shows.
type messageQueueConfig struct {
	LeaseTime  int `json:"leaseTime"`
	RetryLimit int `json:"retryLimit"`
	RetryDelay int `json:"retryDelay"`
	TTL        int `json:"ttl"`
	Priority   int `json:"priority"`
}

// messageGroup is one consumer of the message's partition (the queue-mode
// group among them) and whether it has consumed the message.
type messageGroup struct {
	Name           string  `json:"name"`
	Consumed       bool    `json:"consumed"`
	LeaseExpiresAt *string `json:"leaseExpiresAt"`
}

// messageDeleted is DELETE /api/v1/messages/{partitionId}/{transactionId};
// a miss (404) carries Error too.
type messageDeleted struct {
	Success       bool   `json:"success"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
	Message       string `json:"message"`
	Error         string `json:"error,omitempty"`
}

// retryRefused is the retry route's 503 while push maintenance is on.
type retryRefused struct {
	Success       bool   `json:"success"`
	DLQRowRemoved bool   `json:"dlqRowRemoved"`
	Error         string `json:"error"`
}

// retryMissing is the retry route's 404: no dead-lettered message by that
// key.
type retryMissing struct {
	Success       bool   `json:"success"`
	Error         string `json:"error"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
}

// retryDone is POST /api/v1/messages/{partitionId}/{transactionId}/retry:
// the dead-lettered message pushed again.
type retryDone struct {
	Success               bool          `json:"success"`
	Queue                 string        `json:"queue"`
	Partition             string        `json:"partition"`
	OriginalTransactionID string        `json:"originalTransactionId"`
	DLQRowRemoved         bool          `json:"dlqRowRemoved"`
	ReplayedAs            retryReplayed `json:"replayedAs"`
}

// retryReplayed is the copy a retry pushed, in a push result's shape
// (snake_case ids, as Queen's).
type retryReplayed struct {
	Index         int    `json:"index"`
	MessageID     string `json:"message_id"`
	TransactionID string `json:"transaction_id"` // dlq:<dead-letter row id>
	QueueName     string `json:"queueName"`
	Status        string `json:"status"` // "queued" or "duplicate"
}

// migrationRefused is every /api/v1/migration/* route's 501.
type migrationRefused struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func newMessageRow(m store.MessageRow) messageRow {
	return messageRow{ID: m.ID, TransactionID: m.TransactionID, PartitionID: m.PartitionID,
		QueuePath: m.Queue + "/" + m.Partition, Queue: m.Queue, Partition: m.Partition,
		Namespace: strPtr(m.Namespace), Task: strPtr(m.Task), Status: m.Status, QueueStatus: m.QueueStatus,
		BusStatus: busStatus{ConsumedBy: m.ConsumedBy, TotalGroups: m.TotalGroups},
		TraceID:   m.TraceID, ProducerSub: m.ProducerSub, QueuePriority: m.Priority,
		CreatedAt: msStamp(m.CreatedAt), LeaseExpiresAt: msStampOrNull(m.LeaseExpiresAt), RetryCount: m.RetryCount}
}

// newMessageDetail is d's answer, its payload opened with c; its mode
// counts the bus groups that consumed it.
func newMessageDetail(d store.MessageDetail, c *crypt.Cipher) messageDetail {
	hasQM, consumedBy, groups := false, 0, make([]messageGroup, len(d.Groups))
	for i, g := range d.Groups {
		if g.Name == store.QueueModeGroup {
			hasQM = true
		} else if g.Consumed {
			consumedBy++
		}
		groups[i] = messageGroup{Name: g.Name, Consumed: g.Consumed, LeaseExpiresAt: msStampOrNull(g.LeaseExpiresAt)}
	}
	payload, qc := c.Reveal(d.Payload), d.Config
	return messageDetail{messageRow: newMessageRow(d.MessageRow), RetryCount: d.DLQRetries,
		Payload: payload, Data: payload, IsEncrypted: d.IsEncrypted, ErrorMessage: d.ErrorMessage,
		QueueConfig: messageQueueConfig{LeaseTime: qc.LeaseTime, RetryLimit: qc.RetryLimit, RetryDelay: qc.RetryDelay,
			TTL: qc.TTL, Priority: qc.Priority},
		Mode:           messageMode{consumptionMode: modeBody(hasQM, d.TotalGroups), ConsumedByGroups: consumedBy},
		ConsumerGroups: groups}
}
