package httpapi

import (
	"encoding/json"

	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/streams"
)

// The answers of the streaming SDKs' routes (streams.go), in the shapes
// contract-streams.md gives: top-level fields snake_case, as the SDKs
// read them, except queueName, which Queen spells so.

// streamsDenied is the 403 of a registration the tenant's grant refuses.
type streamsDenied struct {
	Success bool   `json:"success"` // always false
	Denied  bool   `json:"denied"`  // always true
	Error   string `json:"error"`
}

// configHashMismatch is the 409 of a registration whose operator chain
// changed without reset.
type configHashMismatch struct {
	Success bool   `json:"success"` // always false
	QueryID string `json:"query_id"`
	Name    string `json:"name"`
	Error   string `json:"error"`
}

// registeredQuery answers POST /streams/v1/queries.
type registeredQuery struct {
	Success    bool   `json:"success"` // always true
	QueryID    string `json:"query_id"`
	Name       string `json:"name"`
	ConfigHash string `json:"config_hash"`
	Fresh      bool   `json:"fresh"` // the query did not exist before
	Reset      bool   `json:"reset"` // its state was wiped
}

func newRegisteredQuery(q store.StreamQuery) registeredQuery {
	return registeredQuery{Success: true, QueryID: q.ID, Name: q.Name, ConfigHash: q.ConfigHash, Fresh: q.Fresh, Reset: q.Reset}
}

// cycleAnswer answers POST /streams/v1/cycle. A business failure (the
// cycle rolled back) is a 200 too, with success false, a null queueName
// and ack_result, and the error; a committed cycle has no error key.
type cycleAnswer struct {
	Success         bool             `json:"success"`
	QueryID         string           `json:"query_id"`
	PartitionID     string           `json:"partition_id"`
	QueueName       *string          `json:"queueName"` // the source queue; null on failure
	StateOpsApplied int              `json:"state_ops_applied"`
	PushResults     []pushResultWire `json:"push_results"` // never null
	AckResult       *cycleAckResult  `json:"ack_result"`   // null for a flush cycle
	Error           *string          `json:"error,omitempty"`
}

// cycleAckResult is the ack a cycle carried, applied.
type cycleAckResult struct {
	Success       bool `json:"success"` // always true: a failed ack fails the cycle
	Count         int  `json:"count"`
	LeaseReleased bool `json:"lease_released"`
	DLQ           bool `json:"dlq"` // always false: a cycle's nack retries
}

// rolledBackCycle is the answer of a cycle that failed with msg.
func rolledBackCycle(p streams.CycleParams, msg string) cycleAnswer {
	return cycleAnswer{QueryID: p.QueryID, PartitionID: p.PartitionID, PushResults: []pushResultWire{}, Error: &msg}
}

// committedCycle is the answer of a cycle that committed res.
func committedCycle(p streams.CycleParams, res streams.CycleResult) cycleAnswer {
	a := cycleAnswer{Success: true, QueryID: p.QueryID, PartitionID: p.PartitionID, QueueName: &res.QueueName,
		StateOpsApplied: res.StateOpsApplied, PushResults: pushResults(res.Pushed)}
	if a.PushResults == nil {
		a.PushResults = []pushResultWire{}
	}
	if res.Ack != nil {
		a.AckResult = &cycleAckResult{Success: true, Count: res.Ack.Count, LeaseReleased: res.Ack.LeaseReleased}
	}
	return a
}

// stateRows answers POST /streams/v1/state/get.
type stateRows struct {
	Success bool       `json:"success"` // always true
	Rows    []stateRow `json:"rows"`    // never null
}

// stateRow is one key of a query's state in one partition.
type stateRow struct {
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	UpdatedAt string          `json:"updated_at"` // microseconds, UTC
}

func newStateRows(rows []store.StateRow) stateRows {
	out := make([]stateRow, len(rows))
	for i, row := range rows {
		out[i] = stateRow{Key: row.Key, Value: row.Value, UpdatedAt: timestamp(row.UpdatedAt)}
	}
	return stateRows{Success: true, Rows: out}
}
