package httpapi_test

import (
	"testing"
	"time"
)

func TestConsumerGroupRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"m1", "m2", "m3"} {
		e.push(item{"queue": "cg", "partition": "p1", "transactionId": id})
	}
	p := e.pop("/api/v1/pop/queue/cg?consumerGroup=g1")
	e.ack(p.Messages[0].TransactionID, p.PartitionID, p.LeaseID, "completed", "consumerGroup", "g1")

	var list []map[string]any
	e.expect(e.do("GET", "/api/v1/consumer-groups", nil), 200).json(t, &list)
	if len(list) != 1 || list[0]["name"] != "g1" || list[0]["queueName"] != "cg" || list[0]["members"] != float64(1) ||
		list[0]["partitionsWithLag"] != float64(1) || list[0]["state"] != "Stable" || list[0]["subscriptionMode"] != nil ||
		list[0]["queue"] != "cg" || list[0]["partitions"] != float64(1) || list[0]["lagMessages"] != float64(2) {
		t.Fatalf("list: %v", list)
	}
	detail := e.expect(e.do("GET", "/api/v1/consumer-groups/g1", nil), 200).obj(t)
	parts := detail["cg"].(map[string]any)["partitions"].([]any)
	if d := parts[0].(map[string]any); d["partition"] != "p1" || d["offsetLag"] != float64(2) || d["totalConsumed"] != float64(1) {
		t.Fatalf("describe: %v", detail)
	}
	if u := e.expect(e.do("GET", "/api/v1/consumer-groups/nobody", nil), 200).obj(t); len(u) != 0 {
		t.Fatalf("an unknown group is {}: %v", u)
	}
	var lag []map[string]any
	e.expect(e.do("GET", "/api/v1/consumer-groups/lagging", nil), 200).json(t, &lag)
	if len(lag) != 0 {
		t.Fatalf("nothing is an hour late yet: %v", lag)
	}
	e.advanceDB(2 * time.Hour)
	e.expect(e.do("GET", "/api/v1/consumer-groups/lagging", nil), 200).json(t, &lag)
	if len(lag) != 1 || lag[0]["consumer_group"] != "g1" || lag[0]["offset_lag"] != float64(2) {
		t.Fatalf("lagging after two hours: %v", lag)
	}
	e.expect(e.do("GET", "/api/v1/consumer-groups/lagging?minLagSeconds=soon", nil), 400)

	// Seek: to the end, then back to the beginning.
	e.expect(e.do("POST", "/api/v1/consumer-groups/g1/queues/cg/seek", map[string]any{}), 400)
	if r := e.expect(e.do("POST", "/api/v1/consumer-groups/g1/queues/cg/seek", map[string]any{"toEnd": true}), 200).obj(t); r["partitionsUpdated"] != float64(1) {
		t.Fatalf("seek to end: %v", r)
	}
	if p := e.pop("/api/v1/pop/queue/cg?consumerGroup=g1"); p != nil {
		t.Fatalf("after a seek to the end: %+v", p)
	}
	e.expect(e.do("POST", "/api/v1/consumer-groups/g1/queues/cg/seek", map[string]any{"timestamp": "1970-01-01T00:00:00Z"}), 200)
	if p := e.pop("/api/v1/pop/queue/cg?consumerGroup=g1&batch=10"); p == nil || len(p.Messages) != 3 {
		t.Fatalf("after a seek to the beginning: %+v", p)
	}
	if r := e.expect(e.do("POST", "/api/v1/consumer-groups/g1/queues/cg/partitions/p1/seek", nil), 200).obj(t); r["updated"] != true {
		t.Fatalf("partition seek: %v", r)
	}
	e.expect(e.do("POST", "/api/v1/consumer-groups/g1/queues/cg/partitions/nope/seek", map[string]any{}), 404)

	// A group subscribed "new" keeps that until its metadata is deleted.
	if p := e.pop("/api/v1/pop/queue/cg?consumerGroup=g2&subscriptionMode=new"); p != nil {
		t.Fatalf("a new group got history: %+v", p)
	}
	if r := e.expect(e.do("POST", "/api/v1/consumer-groups/g2/subscription", map[string]any{"subscriptionTimestamp": "2020-01-01T00:00:00Z"}), 200).obj(t); r["rowsUpdated"] != float64(1) {
		t.Fatalf("subscription: %v", r)
	}
	e.expect(e.do("POST", "/api/v1/consumer-groups/g2/subscription", map[string]any{}), 400)
	for _, g := range []string{"g3", "g4"} {
		if p := e.pop("/api/v1/pop/queue/cg?consumerGroup=" + g + "&subscriptionMode=new"); p != nil {
			t.Fatalf("a new group got history: %+v", p)
		}
	}
	// Without its metadata a group created again starts afresh (mode all);
	// with it, it keeps its subscription.
	r := e.expect(e.do("DELETE", "/api/v1/consumer-groups/g3?deleteMetadata=true", nil), 200).obj(t)
	if r["success"] != true || r["deletedPartitions"] != float64(1) || r["metadataDeleted"] != true {
		t.Fatalf("delete: %v", r)
	}
	if p := e.pop("/api/v1/pop/queue/cg?consumerGroup=g3&batch=10"); p == nil || len(p.Messages) != 3 {
		t.Fatalf("a group created again must not inherit the deleted subscription: %+v", p)
	}
	e.expect(e.do("DELETE", "/api/v1/consumer-groups/g4?deleteMetadata=false", nil), 200)
	if p := e.pop("/api/v1/pop/queue/cg?consumerGroup=g4&batch=10"); p != nil {
		t.Fatalf("a group whose metadata was kept lost its subscription: %+v", p)
	}
	if r := e.expect(e.do("DELETE", "/api/v1/consumer-groups/ghost/queues/cg?deleteMetadata=false", nil), 200).obj(t); r["deletedPartitions"] != float64(0) || r["queueName"] != "cg" {
		t.Fatalf("deleting an unknown group: %v", r)
	}
	e.expect(e.do("POST", "/api/v1/stats/refresh", nil), 200)
}

// A group ten minutes behind on a queue still being pushed to is Lagging
// by ten minutes: its time lag is the oldest message past its cursor, not
// the newest message's age (which read a few seconds, issue 33).
func TestGroupTimeLagIsTheOldestUnconsumedMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "lagq", "transactionId": "m1"})
	p := e.pop("/api/v1/pop/queue/lagq?consumerGroup=g")
	if p == nil || len(p.Messages) != 1 {
		t.Fatalf("pop: %+v", p)
	}
	e.expect(e.do("POST", "/api/v1/ack", map[string]any{"transactionId": "m1", "partitionId": p.Messages[0].PartitionID,
		"leaseId": p.Messages[0].LeaseID, "status": "completed", "consumerGroup": "g"}), 200)
	e.push(item{"queue": "lagq", "transactionId": "m2"})
	e.advanceDB(10 * time.Minute)
	e.push(item{"queue": "lagq", "transactionId": "m3"})
	var groups []struct {
		Name                   string
		MaxTimeLag, LagSeconds int64
		LagMessages            int64
		State                  string
	}
	e.expect(e.do("GET", "/api/v1/consumer-groups", nil), 200).json(t, &groups)
	if len(groups) != 1 || groups[0].MaxTimeLag < 599 || groups[0].LagSeconds != groups[0].MaxTimeLag ||
		groups[0].LagMessages != 2 || groups[0].State != "Lagging" {
		t.Fatalf("groups %+v; want g 600 s and 2 messages behind, Lagging", groups)
	}
}
