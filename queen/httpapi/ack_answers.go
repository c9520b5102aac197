package httpapi

import (
	"encoding/json"

	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/txn"
)

// errorAnswer is the body of a refused or failed call.
type errorAnswer struct {
	Error string `json:"error"`
	// Code tells a missing route (no_such_route) from a missing object;
	// most errors have none.
	Code string `json:"code,omitempty"`
}

// leaseExtended answers POST /api/v1/lease/{leaseId}/extend.
type leaseExtended struct {
	LeaseID string `json:"leaseId"`
	Success bool   `json:"success"`
	// Renewed is how many messages the lease holds that were extended.
	Renewed int64 `json:"renewed"`
	// The new expiry, null when nothing was renewed, under the three names
	// Queen's clients read.
	NewExpiresAt   *string `json:"newExpiresAt"`
	ExpiresAt      *string `json:"expiresAt"`
	LeaseExpiresAt *string `json:"lease_expires_at"`
}

// txnAnswer answers a transaction that committed.
type txnAnswer struct {
	TransactionID string        `json:"transactionId"`
	Success       bool          `json:"success"`
	Results       []txnOpResult `json:"results"`
	// Timers and KV are there, possibly empty, only when the request had
	// timers or kv ops: pointers, as omitempty would drop an empty list.
	Timers *[]timerResultWire `json:"timers,omitempty"`
	KV     *[]kvResultWire    `json:"kv,omitempty"`
}

// txnOpResult is one operation's result in a committed transaction. A push
// carries the pushed message, any other op an error and dlq: the embedded
// pointer that is nil leaves its keys out.
type txnOpResult struct {
	Index         int    `json:"index"`
	Type          string `json:"type"`
	Success       bool   `json:"success"`
	TransactionID string `json:"transactionId"`
	*txnPushed
	*txnAcked
}

// txnPushed is what a transaction's push answers.
type txnPushed struct {
	MessageID   string `json:"messageId"`
	PartitionID string `json:"partitionId"`
	QueueName   string `json:"queueName"`
	// Duplicate is there (true) only when the push was a duplicate.
	Duplicate bool `json:"duplicate,omitempty"`
}

// txnAcked is what a transaction's ack answers; Error is always null.
type txnAcked struct {
	Error *string `json:"error"`
	DLQ   bool    `json:"dlq"`
}

// txnRefused answers a transaction that rolled back: success false, no
// results, and the kv precondition that failed when that was why.
type txnRefused struct {
	TransactionID string        `json:"transactionId"`
	Success       bool          `json:"success"`
	Error         string        `json:"error"`
	Reason        string        `json:"reason,omitempty"`
	Results       []txnOpResult `json:"results"` // always []
	*kvPreconditionFailed
}

// kvPreconditionFailed is the kv op whose precondition failed and the row it
// found: version and value are null when there was none.
type kvPreconditionFailed struct {
	FailedIndex int             `json:"failedIndex"`
	KVReason    string          `json:"kvReason"`
	Version     *int64          `json:"version"`
	Value       json.RawMessage `json:"value"`
}

// kvRefused answers a POST /api/v1/kv call a precondition refused; nothing
// was written.
type kvRefused struct {
	OK     bool   `json:"ok"`     // always false
	Reason string `json:"reason"` // kv_precondition
	*kvPreconditionFailed
}

// kvAnswer answers a POST /api/v1/kv call that was applied.
type kvAnswer struct {
	Results []kvResultWire `json:"results"`
}

// bufferedPush is one item of a push that went to the spool.
type bufferedPush struct {
	Index  int    `json:"index"`
	Status string `json:"status"` // buffered, or failed
	// The queue and the transaction id under both names Queen's clients read.
	Queue          string `json:"queue"`
	QueueName      string `json:"queueName"`
	Partition      string `json:"partition"`
	TransactionID  string `json:"transactionId"`
	TransactionID2 string `json:"transaction_id"`
	Error          string `json:"error,omitempty"` // why the spool could not keep it
}

func newKVPreconditionFailed(pre *store.KVPrecondition) *kvPreconditionFailed {
	f := &kvPreconditionFailed{FailedIndex: pre.Index, KVReason: pre.Result.Reason}
	if pre.Result.Found {
		f.Version, f.Value = &pre.Result.Version, pre.Result.Value
	}
	return f
}

// txnResults is the answer's results for a committed transaction, and the
// pushes that were not duplicates, whose pops to wake.
func txnResults(results []txn.Result) ([]txnOpResult, []store.PushResult) {
	out := make([]txnOpResult, len(results))
	pushed := []store.PushResult{}
	for i, res := range results {
		out[i] = txnOpResult{Index: res.Index, Type: res.Type, Success: res.Success, TransactionID: res.TransactionID}
		if res.Type != "push" {
			out[i].txnAcked = &txnAcked{DLQ: res.DLQ}
			continue
		}
		out[i].txnPushed = &txnPushed{MessageID: res.MessageID, PartitionID: res.PartitionID,
			QueueName: res.QueueName, Duplicate: res.Duplicate}
		if !res.Duplicate {
			pushed = append(pushed, store.PushResult{Status: "queued", QueueName: res.QueueName, PartitionID: res.PartitionID})
		}
	}
	return out, pushed
}

// bufferedPushes is the answer to a push that went to the spool.
func bufferedPushes(o pushpath.Outcome) []bufferedPush {
	out := make([]bufferedPush, len(o.Buffered))
	for i, e := range o.Buffered {
		out[i] = bufferedPush{Index: i, Status: "buffered", Queue: e.Queue, QueueName: e.Queue,
			Partition: e.Partition, TransactionID: e.TransactionID, TransactionID2: e.TransactionID}
		if o.SpoolErr != nil {
			out[i].Status, out[i].Error = "failed", "File buffer write failed: "+o.SpoolErr.Error()
		}
	}
	return out
}

// txnRolledBack answers a transaction that rolled back; reason, when there
// is one, is the machine-readable why.
func txnRolledBack(txnID, msg, reason string) txnRefused {
	return txnRefused{TransactionID: txnID, Error: msg, Reason: reason, Results: []txnOpResult{}}
}

// txnKVRefused answers a transaction whose kv precondition failed.
func txnKVRefused(txnID string, pre *store.KVPrecondition) txnRefused {
	a := txnRolledBack(txnID, pre.Error(), "kv_precondition")
	a.kvPreconditionFailed = newKVPreconditionFailed(pre)
	return a
}

// kvResults is the answers of the kv ops, in order.
func kvResults(rs []store.KVResult) []kvResultWire {
	out := make([]kvResultWire, len(rs))
	for i, x := range rs {
		out[i] = kvResult(x)
	}
	return out
}

// ptrTo is a pointer to a copy of v, for a list that omitempty must not drop
// when empty.
func ptrTo[T any](v T) *T { return &v }
