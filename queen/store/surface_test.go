package store_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/store"
)

// surfaceItem is one item of the tricky batch, pushed both ways.
type surfaceItem struct {
	partition, txid, payload, trace, sub string
}

// The SQL surface's push stores what the broker's push stores, for the same
// input: the same rows in the same seqs (a row found stored spends its seq
// in both), the same partition counters, and the same answers (a repeat
// within the call and a row stored before are duplicates of the stored
// row). Before, the surface restated the append in PL/pgSQL: its seqs had
// no such gap, so the rows differed.
func TestSQLPushStoresWhatTheBrokerStores(t *testing.T) {
	t.Parallel()
	s, pool := newStoreWithPool(t)
	const t1, t2 = "0b6c1c0e-8a51-4f2c-9d3e-1f2a3b4c5d6e", "7e57d00d-0000-4000-8000-00000000beef"
	stored := []surfaceItem{{"p1", "s1", `{"n": 0}`, "", ""}, {"p2", "s2", `{"n": 0}`, "", ""}}
	batch := []surfaceItem{
		{"p1", "t1", `{"n": 1}`, t1, "alice"},
		{"p2", "t2", `{"n": 2}`, "", ""},
		{"p1", "s1", `{"n": 3}`, "", ""},    // stored before
		{"p1", "t1", `{"n": 4}`, "", "bob"}, // repeats item 0
		{"p1", "t3", `[1, "x"]`, "", ""},
		{"p2", "s2", `{"n": 5}`, t2, ""}, // stored before
		{"p3", "t4", `"text"`, "", "carol"},
		{"p2", "t5", `null`, "", ""},
		{"p1", "t6", `{"n": 6}`, t2, ""},
		{"p3", "t4", `{"n": 7}`, "", ""}, // repeats item 6
	}
	brokerPush(t, s)("same.broker", stored)
	surfacePush(t, pool)("same.sql", stored)
	broker := brokerPush(t, s)("same.broker", batch)
	surface := surfacePush(t, pool)("same.sql", batch)
	if !reflect.DeepEqual(broker, surface) {
		t.Errorf("answers differ:\nbroker  %v\nsurface %v", broker, surface)
	}
	if b, q := storedRows(t, pool, "same.broker"), storedRows(t, pool, "same.sql"); !reflect.DeepEqual(b, q) {
		t.Errorf("stored rows differ:\nbroker  %v\nsurface %v", b, q)
	}
}

// brokerPush pushes items to queue through the broker's statements and
// answers each as "status:transactionId of the row its message id names".
func brokerPush(t *testing.T, s *store.Store) func(string, []surfaceItem) []string {
	return func(queue string, items []surfaceItem) []string {
		t.Helper()
		in := make([]store.PushItem, len(items))
		for i, it := range items {
			in[i] = store.PushItem{Queue: queue, Partition: it.partition, TransactionID: it.txid,
				Payload: crypt.Plain(json.RawMessage(it.payload)), TraceID: it.trace, ProducerSub: it.sub}
		}
		res, err := pushItems(context.Background(), s, tenant, in, "")
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(res))
		for i, r := range res {
			out[i] = r.Status + ":" + rowTxid(t, s.Pool(), r.MessageID)
		}
		return out
	}
}

// surfacePush is brokerPush through queen.push_messages_v3.
func surfacePush(t *testing.T, pool *pgxpool.Pool) func(string, []surfaceItem) []string {
	return func(queue string, items []surfaceItem) []string {
		t.Helper()
		in := make([]map[string]any, len(items))
		for i, it := range items {
			in[i] = map[string]any{"queue": queue, "partition": it.partition, "transactionId": it.txid,
				"payload": json.RawMessage(it.payload), "traceId": it.trace, "producerSub": it.sub}
		}
		body, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Items []struct {
				Index     int    `json:"index"`
				Status    string `json:"status"`
				MessageID string `json:"message_id"`
			} `json:"items"`
		}
		var raw []byte
		if err := pool.QueryRow(context.Background(), `SELECT queen.push_messages_v3($1::jsonb)`, body).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &res); err != nil || len(res.Items) != len(items) {
			t.Fatalf("%s: %v", raw, err)
		}
		out := make([]string, len(res.Items))
		for i, r := range res.Items {
			if r.Index != i {
				t.Fatalf("item %d answered as index %d", i, r.Index)
			}
			out[i] = r.Status + ":" + rowTxid(t, pool, r.MessageID)
		}
		return out
	}
}

// rowTxid is the partition name and transactionId of the stored message id.
func rowTxid(t *testing.T, pool *pgxpool.Pool, id string) string {
	t.Helper()
	var name, txid string
	if err := pool.QueryRow(context.Background(), `SELECT p.name, m.transaction_id FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id WHERE m.id = $1`, id).Scan(&name, &txid); err != nil {
		t.Fatalf("message %s: %v", id, err)
	}
	return name + "/" + txid
}

// storedRows lists queue's messages and partition counters, ids aside.
func storedRows(t *testing.T, pool *pgxpool.Pool, queue string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT format('%s seq %s %s %s trace=%s sub=%s enc=%s', p.name, m.seq, m.transaction_id, m.payload,
			m.trace_id, m.producer_sub, m.is_encrypted)
		FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.tenant_id = $1 AND q.name = $2
		UNION ALL
		SELECT format('%s last_seq %s appended %s', p.name, p.last_seq, p.appended)
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1 AND q.name = $2
		ORDER BY 1`, tenant, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		out = append(out, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A push through the SQL surface that waits for a partition another call
// holds, with the same transactionId, answers duplicate with the id the
// other call committed (append_duplicates reads with a new snapshot), as
// the broker's push does.
func TestSQLPushRaceAnswersTheCommittedRow(t *testing.T) {
	t.Parallel()
	_, pool := newStoreWithPool(t)
	ctx := context.Background()
	item := `[{"queue": "race", "partition": "P", "transactionId": "x"}]`
	if _, err := pool.Exec(ctx, `SELECT queen.push_messages_v3('[{"queue": "race", "partition": "P", "transactionId": "first"}]')`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var held []byte
	if err := tx.QueryRow(ctx, `SELECT queen.push_messages_v3($1::jsonb) -> 'items' -> 0`, item).Scan(&held); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		raw []byte
		err error
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		a.err = pool.QueryRow(ctx, `SELECT queen.push_messages_v3($1::jsonb) -> 'items' -> 0`, item).Scan(&a.raw)
		done <- a
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second push never waited for the partition")
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	var first, second struct {
		Status    string `json:"status"`
		MessageID string `json:"message_id"`
	}
	if a.err != nil || json.Unmarshal(held, &first) != nil || json.Unmarshal(a.raw, &second) != nil {
		t.Fatalf("%s %s %v", held, a.raw, a.err)
	}
	if first.Status != "queued" || second.Status != "duplicate" || second.MessageID != first.MessageID {
		t.Fatalf("held %s, waited %s", held, a.raw)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queen.messages WHERE transaction_id = 'x'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows stored (%v)", n, err)
	}
}

// The surface's statement functions are the statements: each body is the
// Go constant's text, and a database an older broker migrated (whose
// functions are that broker's statements, its generated step recorded
// under another hash) gets this broker's at the next Migrate. An edit of
// appendSQL or dupLookupSQL therefore reaches the SQL surface; a function
// written by hand, or a step that ran once, fails here.
func TestSurfaceFunctionsAreTheStatements(t *testing.T) {
	t.Parallel()
	_, pool := newStoreWithPool(t)
	ctx := context.Background()
	same := func(when string) {
		t.Helper()
		for name, body := range store.SurfaceStatements {
			rows, err := pool.Query(ctx, `SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
				WHERE n.nspname = 'queen' AND p.proname = $1`, name)
			if err != nil {
				t.Fatal(err)
			}
			src, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || len(src) != 1 {
				t.Fatalf("%s: queen.%s: %d functions (%v)", when, name, len(src), err)
			}
			if src[0] != body {
				t.Errorf("%s: queen.%s is not its statement:\n%s\nwant\n%s", when, name, src[0], body)
			}
		}
	}
	same("after Migrate")
	// The database as a broker with other statements left it: its
	// functions and its step's ledger key.
	older := store.SurfaceFunctions()
	for i := range older {
		older[i].Body += "\n\t-- as an older broker stated it\n"
	}
	oldVersion, oldBody := store.SurfaceMigration(older)
	version, _ := store.SurfaceMigration(nil)
	if _, err := pool.Exec(ctx, oldBody); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE queen.schema_migrations SET version = $2 WHERE version = $1`, version, oldVersion); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	same("after an older broker's functions and Migrate")
}
