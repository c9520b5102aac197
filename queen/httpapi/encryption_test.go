package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/queen-go/queen/queen/config"
)

// TestEncryptionAtRest: a queue with encryptionEnabled stores its payloads
// sealed (the database never holds the plaintext) and every read (pop, DLQ,
// message view) gives the plaintext back; other queues are stored in the
// clear; a broker with no key refuses to configure such a queue.
func TestEncryptionAtRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.EncryptionKey = strings.Repeat("4f", 32) })
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "secret", "options": map[string]any{"encryptionEnabled": true}}), 200)
	e.push(item{"queue": "secret", "transactionId": "s1", "payload": map[string]any{"card": "4111-1111"}})
	e.push(item{"queue": "plain", "transactionId": "p1", "payload": map[string]any{"card": "5500-0000"}})
	var raw string
	var sealed bool
	if err := e.store.Pool().QueryRow(context.Background(), `SELECT payload::text, is_encrypted FROM queen.messages WHERE transaction_id = 's1'`).Scan(&raw, &sealed); err != nil {
		t.Fatal(err)
	}
	if !sealed || strings.Contains(raw, "4111") || !strings.Contains(raw, "authTag") {
		t.Fatalf("stored in the clear: %v %s", sealed, raw)
	}
	if err := e.store.Pool().QueryRow(context.Background(), `SELECT payload::text, is_encrypted FROM queen.messages WHERE transaction_id = 'p1'`).Scan(&raw, &sealed); err != nil || sealed || !strings.Contains(raw, "5500") {
		t.Fatalf("a queue without encryption was sealed: %v %s", sealed, raw)
	}
	p := e.pop("/api/v1/pop/queue/secret")
	if p == nil || !strings.Contains(string(p.Messages[0].Data), "4111-1111") {
		t.Fatalf("pop did not open the payload: %+v", p)
	}
	if d := e.expect(e.do("GET", "/api/v1/messages/"+p.PartitionID+"/s1", nil), 200).obj(t); d["payload"].(map[string]any)["card"] != "4111-1111" {
		t.Fatalf("message view: %v", d)
	}
	body := map[string]any{"operations": []any{
		map[string]any{"type": "ack", "transactionId": "s1", "partitionId": p.PartitionID, "status": "failed"},
	}, "requiredLeases": []any{p.LeaseID}}
	e.expect(e.do("POST", "/api/v1/transaction", body), 200)
	if d := e.expect(e.do("GET", "/api/v1/dlq", nil), 200); !strings.Contains(string(d.body), "4111-1111") {
		t.Fatalf("DLQ read did not open the payload: %s", d.body)
	}

	keyless := newEnv(t)
	r := keyless.do("POST", "/api/v1/configure", map[string]any{"queue": "secret", "options": map[string]any{"encryptionEnabled": true}})
	if r.status != 400 || !strings.Contains(string(r.body), "QUEEN_ENCRYPTION_KEY") {
		t.Fatalf("configure encryption with no key: %d %s", r.status, r.body)
	}
}

// A streams cycle's sink pushes into an encrypted queue are sealed like any
// push, and opened on pop.
func TestStreamsSinkPushesAreSealed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.EncryptionKey = strings.Repeat("4f", 32) })
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "vault", "options": map[string]any{"encryptionEnabled": true}}), 200)
	q := e.expect(e.do("POST", "/streams/v1/queries", map[string]any{"name": "seal", "source_queue": "src", "config_hash": "h"}), 200).obj(t)["query_id"]
	e.push(item{"queue": "src", "transactionId": "m"})
	p := e.pop("/api/v1/pop/queue/src")
	r := e.expect(e.do("POST", "/streams/v1/cycle", map[string]any{"query_id": q, "partition_id": p.PartitionID,
		"push_items": []any{map[string]any{"queue": "vault", "transactionId": "v1", "payload": map[string]any{"pin": "9876"}}},
		"ack":        map[string]any{"transactionId": "m", "leaseId": p.LeaseID}}), 200).obj(t)
	if r["success"] != true {
		t.Fatalf("cycle: %v", r)
	}
	var raw string
	var sealed bool
	if err := e.store.Pool().QueryRow(context.Background(), `SELECT payload::text, is_encrypted FROM queen.messages WHERE transaction_id = 'v1'`).Scan(&raw, &sealed); err != nil {
		t.Fatal(err)
	}
	if !sealed || strings.Contains(raw, "9876") {
		t.Fatalf("a sink push was stored in the clear: %v %s", sealed, raw)
	}
	if got := e.pop("/api/v1/pop/queue/vault"); got == nil || !strings.Contains(string(got.Messages[0].Data), "9876") {
		t.Fatalf("pop of the sink: %+v", got)
	}
}

// TestDLQRetryOfAnEncryptedMessage: a retried dead letter of an encrypted
// queue is delivered as its plaintext, stored sealed once. Before, the
// stored envelope was pushed as if it were plaintext and sealed again, so
// the consumer got {"iv","authTag","encrypted"}.
func TestDLQRetryOfAnEncryptedMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.EncryptionKey = strings.Repeat("4f", 32) })
	e.expect(e.do("POST", "/api/v1/configure", map[string]any{"queue": "secret", "options": map[string]any{"encryptionEnabled": true, "retryLimit": 0}}), 200)
	e.push(item{"queue": "secret", "transactionId": "s1", "payload": map[string]any{"card": "4111-1111"}})
	p := e.pop("/api/v1/pop/queue/secret")
	e.expect(e.do("POST", "/api/v1/ack", map[string]any{"transactionId": "s1", "partitionId": p.PartitionID, "leaseId": p.LeaseID, "status": "failed"}), 200)
	e.expect(e.do("POST", "/api/v1/messages/"+p.PartitionID+"/s1/retry", map[string]any{}), 200)
	again := e.pop("/api/v1/pop/queue/secret")
	if again == nil || len(again.Messages) != 1 || string(again.Messages[0].Data) != `{"card":"4111-1111"}` {
		t.Fatalf("the retried message: %+v", again)
	}
	var raw string
	if err := e.pool.QueryRow(context.Background(), `SELECT payload::text FROM queen.messages WHERE transaction_id LIKE 'dlq:%'`).Scan(&raw); err != nil || strings.Contains(raw, "4111") {
		t.Fatalf("the retry stored %s (%v)", raw, err)
	}
}

// TestEncryptionTurnedOnElsewhereIsHonoured: another broker turns a queue's
// encryption on (here: its committed row) while this one still holds the
// queue as plain; the next push is stored sealed, since the statement that
// writes reads the setting. A broker without a key refuses the push instead
// of storing plaintext in an encrypted queue.
func TestEncryptionTurnedOnElsewhereIsHonoured(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *config.Config) { c.EncryptionKey = strings.Repeat("4f", 32) })
	e.push(item{"queue": "turned", "transactionId": "before", "payload": map[string]any{"pin": "1111"}})
	e.sql(t, `UPDATE queen.queues SET encryption_enabled = true WHERE name = 'turned'`)
	e.push(item{"queue": "turned", "transactionId": "after", "payload": map[string]any{"pin": "2222"}})
	var raw string
	var sealed bool
	if err := e.pool.QueryRow(context.Background(), `SELECT payload::text, is_encrypted FROM queen.messages WHERE transaction_id = 'after'`).Scan(&raw, &sealed); err != nil {
		t.Fatal(err)
	}
	if !sealed || strings.Contains(raw, "2222") {
		t.Fatalf("stored in the clear after encryption was turned on: %v %s", sealed, raw)
	}
	p := e.pop("/api/v1/pop/queue/turned?batch=2")
	if p == nil || len(p.Messages) != 2 || !strings.Contains(string(p.Messages[1].Data), "2222") {
		t.Fatalf("pop: %+v", p)
	}

	keyless := newEnv(t)
	keyless.push(item{"queue": "turned", "transactionId": "before", "payload": 1})
	keyless.sql(t, `UPDATE queen.queues SET encryption_enabled = true WHERE name = 'turned'`)
	// One push, two items: the plain queue's is not half committed
	// beside the refused one.
	r := keyless.do("POST", "/api/v1/push", map[string]any{"items": []item{{"queue": "open", "transactionId": "beside", "payload": 1},
		{"queue": "turned", "transactionId": "clear", "payload": map[string]any{"pin": "3333"}}}})
	if r.status == 201 || !strings.Contains(string(r.body), "QUEEN_ENCRYPTION_KEY") {
		t.Fatalf("a keyless broker's push into an encrypted queue: %d %s", r.status, r.body)
	}
	var n int
	_ = keyless.pool.QueryRow(context.Background(), `SELECT count(*) FROM queen.messages WHERE transaction_id IN ('clear', 'beside')`).Scan(&n)
	if n != 0 {
		t.Fatalf("a refused push stored %d of its items (plaintext into an encrypted queue, or half a batch)", n)
	}
}
