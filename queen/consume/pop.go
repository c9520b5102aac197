package consume

import (
	"encoding/json"
	"time"

	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/store"
)

// PopRequest is one pop call, as the wire or the simulator asks it: the
// Claimer decides the pop statement's arguments (store.PopParams) of it.
type PopRequest struct {
	Tenant    string
	Queue     string
	Partition string // "" pops any partition
	Group     string // "" means store.QueueModeGroup
	Batch     int    // max messages in total
	// Partitions is the max partitions claimed by one wildcard pop.
	Partitions int
	AutoAck    bool
	// SubscriptionMode (all or new) and SubscriptionFrom apply only when a
	// named group first touches the queue.
	SubscriptionMode string
	SubscriptionFrom *time.Time
	// LeaseSeconds overrides the queue's leaseTime when > 0.
	LeaseSeconds int
	// MaxBytes bounds the answer's payload bytes, each payload counted
	// twice (the pop answer writes it as data and as payload); 0: no
	// bound. The first message is always taken (the store's popBytesSQL).
	MaxBytes int64
	// Epoch is the placement epoch the router found the queue at (shards
	// configured): a pop of a queue no longer at it fails as moved
	// (store.ErrMoved), claiming nothing. 0, without shards, checks nothing.
	Epoch int64
}

// Message is a delivered message.
type Message struct {
	ID            string
	TransactionID string
	TraceID       *string
	Data          json.RawMessage
	ProducerSub   *string
	CreatedAt     time.Time
	Seq           int64
	PartitionID   string
	Partition     string
	Queue         string
	LeaseID       string
	ConsumerGroup string
	RetryCount    int
}

// PopResult is what a pop claimed. An empty Messages means nothing was
// claimed and no lease is held.
type PopResult struct {
	Queue             string
	Partition         string
	PartitionID       string
	LeaseID           string
	Group             string
	Messages          []Message
	PartitionsClaimed int
	LeaseExpiresAt    time.Time
	// Epoch is the request's routed epoch (0 without shards): an autoAck
	// pop's completion (Complete) is routed with it.
	Epoch int64
}

// popResult is req's answer of the pop statement's rows: each message
// labelled with the queue and group it was popped for, its payload opened
// with c (crypt.Cipher.Reveal), the lease token only when the pop leased
// (not autoAck) and claimed something, the first row's partition, the last
// row's lease end.
func popResult(req PopRequest, rows store.PopRows, c *crypt.Cipher) PopResult {
	res := PopResult{Queue: req.Queue, Group: req.Group, Epoch: req.Epoch}
	parts := map[string]bool{}
	for _, r := range rows.Rows {
		m := Message{ID: r.ID, TransactionID: r.TransactionID, TraceID: r.TraceID, Data: c.Reveal(r.Payload), ProducerSub: r.ProducerSub,
			CreatedAt: r.CreatedAt, Seq: r.Seq, PartitionID: r.PartitionID, Partition: r.Partition, Queue: req.Queue,
			ConsumerGroup: req.Group, RetryCount: r.RetryCount}
		if !req.AutoAck {
			m.LeaseID = rows.LeaseID
		}
		if res.PartitionID == "" {
			res.PartitionID, res.Partition = m.PartitionID, m.Partition
		}
		if r.LeaseExpiresAt != nil {
			res.LeaseExpiresAt = *r.LeaseExpiresAt
		}
		parts[m.PartitionID] = true
		res.Messages = append(res.Messages, m)
	}
	res.PartitionsClaimed = len(parts)
	if len(res.Messages) > 0 && !req.AutoAck {
		res.LeaseID = rows.LeaseID
	}
	return res
}
