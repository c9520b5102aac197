package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/queen-go/queen/queen/streams"
)

// The cycle answers keep the keys the SDKs and the simulator read: a
// failure has a null queueName and ack_result and an error, a commit has
// no error key, and push_results and rows are lists, never null.
func TestCycleAndStateAnswersKeepTheirNullsAndLists(t *testing.T) {
	p := streams.CycleParams{QueryID: "q", PartitionID: "p"}
	for _, c := range []struct {
		answer any
		want   string
	}{
		{rolledBackCycle(p, "query not found"), `{"success":false,"query_id":"q","partition_id":"p","queueName":null,` +
			`"state_ops_applied":0,"push_results":[],"ack_result":null,"error":"query not found"}`},
		{committedCycle(p, streams.CycleResult{QueueName: "s", StateOpsApplied: 2}), `{"success":true,"query_id":"q",` +
			`"partition_id":"p","queueName":"s","state_ops_applied":2,"push_results":[],"ack_result":null}`},
		{committedCycle(p, streams.CycleResult{QueueName: "s", Ack: &streams.CycleAckResult{Count: 3}}), `{"success":true,` +
			`"query_id":"q","partition_id":"p","queueName":"s","state_ops_applied":0,"push_results":[],` +
			`"ack_result":{"success":true,"count":3,"lease_released":false,"dlq":false}}`},
		{newStateRows(nil), `{"success":true,"rows":[]}`},
		{timerList{Queue: "q", Rows: []timerWire{}}, `{"queue":"q","rows":[],"truncated":false}`},
	} {
		got, err := json.Marshal(c.answer)
		if err != nil || string(got) != c.want {
			t.Errorf("got %s (%v)\nwant %s", got, err, c.want)
		}
	}
}
