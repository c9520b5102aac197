package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/queen-go/queen/queen/store"
)

// TestSystemAnswersKeepTheirNullsAndOmissions pins the encodings a typed
// answer can get wrong where the maps it replaced could not: an empty list
// is [] (a nil slice would be null), a key the map always set is present
// as null, and a key the map set only sometimes is left out otherwise.
func TestSystemAnswersKeepTheirNullsAndOmissions(t *testing.T) {
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"empty cluster", newClusterInfo("b1", store.ClusterView{}, nil),
			`{"serverId":"b1","brokers":[],"leaders":[],"mesh":null,"timers":[],"kvNamespaces":[]}`},
		{"no peers", sharedStateAbsent{meshAbsent: newMeshAbsent("b1"), Transport: "none"},
			`{"enabled":false,"server_id":"b1","peers":[],"transport":"none","peer_count":0}`},
		{"buffers, not an admin, no drainer", spoolStatus{Enabled: true},
			`{"pending":0,"failed":0,"dbHealthy":false,"worker":0,"enabled":true,"maintenanceMode":false}`},
		{"buffers with a drainer", spoolStatus{drainCounts: &drainCounts{ReplayedFiles: 3}},
			`{"pending":0,"failed":0,"dbHealthy":false,"worker":0,"enabled":false,"maintenanceMode":false,` +
				`"replayedFiles":3,"quarantinedFiles":0,"cooldowns":0}`},
		{"healthy", healthStatus{Status: "healthy"},
			`{"server":"","version":"","serverId":"","status":"healthy","database":""}`},
	} {
		got, err := json.Marshal(c.v)
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %s %v\nwant %s", c.name, got, err, c.want)
		}
	}
	// A message's detail: the dead-letter retry count shadows the row's,
	// null when there is none; no groups is [].
	d, _ := json.Marshal(newMessageDetail(store.MessageDetail{MessageRow: store.MessageRow{RetryCount: 4}}, nil))
	var m map[string]any
	if err := json.Unmarshal(d, &m); err != nil {
		t.Fatal(err)
	}
	if v, ok := m["retryCount"]; !ok || v != nil || m["consumerGroups"] == nil || m["payload"] != nil || m["namespace"] != nil {
		t.Fatalf("detail: %s", d)
	}
	if _, ok := m["payload"]; !ok {
		t.Fatalf("detail without its payload key: %s", d)
	}
}
