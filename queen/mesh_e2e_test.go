package queen_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queen"
	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/store/storetest"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// meshPair starts two brokers on one database, joined by the mesh. Every
// periodic floor is an hour, so anything that reaches the other broker
// within the test came over the mesh.
func meshPair(t *testing.T, secretA, secretB string) (a, b *queen.Broker) {
	t.Helper()
	dsn := storetest.DSN(t)
	pa, pb := freePort(t), freePort(t)
	mk := func(id string, port, peer int, secret string) config.Config {
		cfg := testConfig(t, dsn)
		cfg.ServerID = id
		cfg.MeshPort, cfg.MeshPeers, cfg.MeshSecret = port, []string{fmt.Sprintf("127.0.0.1:%d", peer)}, secret
		cfg.MeshHeartbeat, cfg.MeshDeadAfter = 100*time.Millisecond, time.Second
		cfg.PopWaitInitial, cfg.PopWaitMax = time.Hour, time.Hour
		cfg.CacheRefreshInterval = time.Hour
		return cfg
	}
	a = start(t, mk("a", pa, pb, secretA))
	b = start(t, mk("b", pb, pa, secretB))
	t.Cleanup(func() { a.Crash(); b.Crash() })
	return a, b
}

type sharedState struct {
	Enabled           bool  `json:"enabled"`
	ServersAlive      int   `json:"servers_alive"`
	SignatureFailures int64 `json:"signature_failures"`
	MessagesReceived  int64 `json:"messages_received"`
	Peers             []struct {
		Connected bool `json:"connected"`
	} `json:"peers"`
}

func readSharedState(t *testing.T, b *queen.Broker) sharedState {
	t.Helper()
	code, body := get(t, "http://"+b.Addr()+"/api/v1/system/shared-state")
	var s sharedState
	if code != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("shared-state: %d %s", code, body)
	}
	return s
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func linked(t *testing.T, a, b *queen.Broker) {
	t.Helper()
	eventually(t, "the mesh links", func() bool {
		sa, sb := readSharedState(t, a), readSharedState(t, b)
		return sa.ServersAlive == 1 && sb.ServersAlive == 1 && sa.Peers[0].Connected && sb.Peers[0].Connected
	})
}

// TestMeshWakesALongPollOnAnotherBroker: the long poll on B re-checks the
// database only every hour and would wait two minutes; it answers the
// message pushed on A at once only because A's hint woke it.
func TestMeshWakesALongPollOnAnotherBroker(t *testing.T) {
	a, b := meshPair(t, "s3cret", "s3cret")
	linked(t, a, b)
	if code, body := post(t, "http://"+a.Addr()+"/api/v1/configure", `{"queue":"mq"}`); code != 200 {
		t.Fatalf("configure: %d %s", code, body)
	}
	type answer struct {
		code int
		body string
		took time.Duration
	}
	done := make(chan answer, 1)
	go func() {
		began := time.Now()
		// The pop would wait two minutes; the client gives up after 30 s,
		// which only a pop left to its own re-checks reaches.
		c := http.Client{Timeout: 30 * time.Second}
		resp, err := c.Get("http://" + b.Addr() + "/api/v1/pop/queue/mq?wait=true&timeout=120000")
		if err != nil {
			done <- answer{code: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		done <- answer{resp.StatusCode, string(body), time.Since(began)}
	}()
	time.Sleep(300 * time.Millisecond) // let the pop park
	if code, body := post(t, "http://"+a.Addr()+"/api/v1/push",
		`{"items":[{"queue":"mq","payload":{"n":1}}]}`); code != 201 {
		t.Fatalf("push on a: %d %s", code, body)
	}
	got := <-done
	if got.code != 200 || !strings.Contains(got.body, `"n":1`) {
		t.Fatalf("the long poll on b was not woken by a's push: %d %s after %v", got.code, got.body, got.took)
	}
	t.Logf("push on a reached the long poll on b after %v (floor: 1 h)", got.took)
}

// TestMeshLeaseTakenOnOneIsAckedOnTheOther: no affinity. A lease taken on
// A is extended, acked and used in a transaction on B, and a transactionId
// pushed on both is stored once.
func TestMeshLeaseTakenOnOneIsAckedOnTheOther(t *testing.T) {
	a, b := meshPair(t, "s", "s")
	post(t, "http://"+a.Addr()+"/api/v1/push", `{"items":[{"queue":"lq","payload":1,"transactionId":"one"}]}`)
	if code, body := post(t, "http://"+b.Addr()+"/api/v1/push", `{"items":[{"queue":"lq","payload":1,"transactionId":"one"}]}`); code != 201 || !strings.Contains(body, `"duplicate"`) {
		t.Fatalf("the same transactionId pushed on the other broker: %d %s", code, body)
	}
	code, body := get(t, "http://"+a.Addr()+"/api/v1/pop/queue/lq")
	var pop struct {
		Messages []struct {
			TransactionID string `json:"transactionId"`
			PartitionID   string `json:"partitionId"`
			LeaseID       string `json:"leaseId"`
		} `json:"messages"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &pop) != nil || len(pop.Messages) != 1 {
		t.Fatalf("pop on a: %d %s", code, body)
	}
	m := pop.Messages[0]
	if code, body := post(t, "http://"+b.Addr()+"/api/v1/lease/"+m.LeaseID+"/extend", `{"seconds":60}`); code != 200 || !strings.Contains(body, `"success":true`) {
		t.Fatalf("extend on b of a's lease: %d %s", code, body)
	}
	code, body = post(t, "http://"+b.Addr()+"/api/v1/transaction", fmt.Sprintf(`{"operations":[
		{"type":"push","items":[{"queue":"out","transactionId":"result"}]},
		{"type":"ack","transactionId":%q,"partitionId":%q,"status":"completed"}],"requiredLeases":[%q]}`,
		m.TransactionID, m.PartitionID, m.LeaseID))
	if code != 200 || !strings.Contains(body, `"success":true`) {
		t.Fatalf("transaction on b under a's lease: %d %s", code, body)
	}
	if code, body := get(t, "http://"+a.Addr()+"/api/v1/pop/queue/lq"); code != 204 {
		t.Fatalf("the acked message came back: %d %s", code, body)
	}
	// And a plain ack on b of a lease taken on a.
	post(t, "http://"+a.Addr()+"/api/v1/push", `{"items":[{"queue":"lq","payload":2,"transactionId":"two"}]}`)
	code, body = get(t, "http://"+a.Addr()+"/api/v1/pop/queue/lq")
	if code != 200 || json.Unmarshal([]byte(body), &pop) != nil || len(pop.Messages) != 1 {
		t.Fatalf("pop on a: %d %s", code, body)
	}
	m = pop.Messages[0]
	code, body = post(t, "http://"+b.Addr()+"/api/v1/ack", fmt.Sprintf(
		`{"transactionId":%q,"partitionId":%q,"leaseId":%q,"status":"completed"}`, m.TransactionID, m.PartitionID, m.LeaseID))
	if code != 200 || !strings.Contains(body, `"success":true`) {
		t.Fatalf("ack on b of a's lease: %d %s", code, body)
	}
	if code, body := get(t, "http://"+b.Addr()+"/api/v1/pop/queue/lq"); code != 204 {
		t.Fatalf("the acked message came back: %d %s", code, body)
	}
}

// TestMeshCarriesMaintenanceAndQueueForgets: the reconcile floor is an
// hour, so pop maintenance flipped on A reaches B by frame only; a queue
// deleted and created again on A is found by B's next pop, not after B's
// cached id expires.
func TestMeshCarriesMaintenanceAndQueueForgets(t *testing.T) {
	a, b := meshPair(t, "s", "s")
	linked(t, a, b)
	// Enough messages that pops b serves before the flip reaches it leave
	// some for the pop that checks the flip back; autoAck pops hold no
	// lease, so none hides the partition from the next.
	var items []string
	for i := range 50 {
		items = append(items, fmt.Sprintf(`{"queue":"fq","payload":%d}`, i))
	}
	post(t, "http://"+a.Addr()+"/api/v1/push", `{"items":[`+strings.Join(items, ",")+`]}`)
	post(t, "http://"+a.Addr()+"/api/v1/system/maintenance/pop", `{"enabled":true}`)
	eventually(t, "b to stop serving pops", func() bool {
		code, _ := get(t, "http://"+b.Addr()+"/api/v1/pop/queue/fq?autoAck=true")
		return code == 204
	})
	post(t, "http://"+a.Addr()+"/api/v1/system/maintenance/pop", `{"enabled":false}`)
	eventually(t, "b to serve pops again", func() bool {
		code, _ := get(t, "http://"+b.Addr()+"/api/v1/pop/queue/fq?autoAck=true")
		return code == 200
	})
	// b has cached fq's id; a deletes it and creates it again.
	if code, body := do(t, http.MethodDelete, "http://"+a.Addr()+"/api/v1/resources/queues/fq", "", ""); code != 200 {
		t.Fatalf("delete on a: %d %s", code, body)
	}
	post(t, "http://"+a.Addr()+"/api/v1/push", `{"items":[{"queue":"fq","payload":2}]}`)
	eventually(t, "b to find the new queue", func() bool {
		code, _ := get(t, "http://"+b.Addr()+"/api/v1/pop/queue/fq?autoAck=true")
		return code == 200
	})
	if s := readSharedState(t, b); s.MessagesReceived < 3 {
		t.Fatalf("b's counters: %+v", s)
	}
}

func TestMeshRefusesAWrongSecret(t *testing.T) {
	a, b := meshPair(t, "right", "wrong")
	eventually(t, "both to refuse the other's HELLO", func() bool {
		return readSharedState(t, a).SignatureFailures > 0 && readSharedState(t, b).SignatureFailures > 0
	})
	if s := readSharedState(t, b); s.ServersAlive != 0 {
		t.Fatalf("b counts a peer with the wrong secret alive: %+v", s)
	}
	// The refusals are in the metrics too.
	_, metrics := get(t, "http://"+b.Addr()+"/metrics/prometheus")
	for _, family := range []string{"queen_mesh_signature_failures_total", "queen_mesh_handshake_failures_total",
		"queen_mesh_sequence_rejections_total", "queen_mesh_connections_refused_total"} {
		if !strings.Contains(metrics, "\n"+family+" ") {
			t.Fatalf("no %s in the scrape", family)
		}
	}
	if strings.Contains(metrics, "\nqueen_mesh_signature_failures_total 0\n") {
		t.Fatal("the scrape counts no signature failure")
	}
}

func TestNoPeersBindsNothing(t *testing.T) {
	cfg := testConfig(t, storetest.DSN(t))
	cfg.MeshPort = freePort(t)
	b := start(t, cfg)
	defer b.Crash()
	if s := readSharedState(t, b); s.Enabled {
		t.Fatalf("a broker with no peers reports a mesh: %+v", s)
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", cfg.MeshPort))
	if err != nil {
		t.Fatalf("a broker with no peers bound the mesh port: %v", err)
	}
	l.Close()
}

func jsonBody(s string) io.Reader { return strings.NewReader(s) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
