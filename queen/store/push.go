package store

import (
	"context"
	"encoding/json"
	"github.com/queen-go/queen/queen/canary"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// PushItem is one message to append.
type PushItem struct {
	Queue         string
	Partition     string          // "" means Default
	Payload       json.RawMessage // nil is stored as JSON null
	TransactionID string          // "" means the new message id
	TraceID       string          // "" or a UUID
}

// PushResult is the outcome of one item.
type PushResult struct {
	Index         int
	Status        string // queued or duplicate
	MessageID     string
	TransactionID string
	PartitionID   string
	QueueName     string
	TraceID       string
}

// Push appends items in one transaction and returns one result per item, in
// input order. It returns only after COMMIT: a "queued" answer is durable.
// Queues and partitions are created on first use.
func (s *Store) Push(ctx context.Context, tenant string, items []PushItem, producerSub string) ([]PushResult, error) {
	var out []PushResult
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		var err error
		out, err = s.pushTx(ctx, tx, now, tenant, items, producerSub)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

type partKey struct{ queue, partition string }

// pushTx appends items inside tx.
//
// Invariant (cursor order = visibility order): each touched partition row is
// locked FOR UPDATE until COMMIT and its last_seq allocates the new seqs, so
// within a partition a higher seq never becomes visible before a lower one.
// Invariant (exact dedup): the (partition, transactionId) lookup happens
// under that same lock, so concurrent identical pushes serialise and the
// second sees the first's row.
func (s *Store) pushTx(ctx context.Context, tx pgx.Tx, now time.Time, tenant string, items []PushItem, producerSub string) ([]PushResult, error) {
	out := make([]PushResult, len(items))
	if len(items) == 0 {
		return out, nil
	}
	// Resolve queues and partitions in a fixed (name) order so concurrent
	// pushes that create them cannot wait on each other in a cycle.
	keys := make([]partKey, 0, len(items))
	seen := map[partKey]bool{}
	for i := range items {
		if items[i].Partition == "" {
			items[i].Partition = DefaultPartition
		}
		k := partKey{items[i].Queue, items[i].Partition}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].queue != keys[j].queue {
			return keys[i].queue < keys[j].queue
		}
		return keys[i].partition < keys[j].partition
	})
	// The common case, every queue and partition already there, is one
	// lookup; only missing ones take the create path below.
	pids := map[partKey]string{}
	qnames, pnames := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		qnames[i], pnames[i] = k.queue, k.partition
	}
	rows, err := tx.Query(ctx, `
		SELECT q.name, p.name, p.id::text
		FROM unnest($2::text[], $3::text[]) AS k(qn, pn)
		JOIN queen.queues q ON q.tenant_id = $1 AND q.name = k.qn
		JOIN queen.partitions p ON p.queue_id = q.id AND p.name = k.pn`, tenant, qnames, pnames)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k partKey
		var id string
		if err := rows.Scan(&k.queue, &k.partition, &id); err != nil {
			return nil, err
		}
		pids[k] = id
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	queues := map[string]Queue{}
	for _, k := range keys {
		if _, ok := pids[k]; ok {
			continue
		}
		q, ok := queues[k.queue]
		if !ok {
			var err error
			if q, err = s.ensureQueue(ctx, tx, tenant, k.queue, now); err != nil {
				return nil, err
			}
			queues[k.queue] = q
		}
		pid, err := s.ensurePartition(ctx, tx, q.ID, k.partition, now)
		if err != nil {
			return nil, err
		}
		pids[k] = pid
	}
	idList := make([]string, 0, len(pids))
	for _, id := range pids {
		idList = append(idList, id)
	}
	lockSQL := `SELECT id::text, last_seq FROM queen.partitions WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE`
	stranded := canary.On("stranded")
	if stranded {
		// The reference broker's bug: no per-partition serialisation, and
		// an order fixed at creation rather than at commit.
		lockSQL = `SELECT id::text, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM queen.partitions WHERE id = ANY($1::uuid[])`
	}
	rows, err = tx.Query(ctx, lockSQL, idList)
	if err != nil {
		return nil, err
	}
	lastSeq := map[string]int64{}
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			return nil, err
		}
		lastSeq[id] = seq
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	type dedupKey struct{ pid, txid string }
	itemPIDs := make([]string, len(items))
	txids := make([]string, len(items))
	for i, it := range items {
		itemPIDs[i] = pids[partKey{it.Queue, it.Partition}]
		txids[i] = it.TransactionID
	}
	existing := map[dedupKey]string{}
	rows, err = tx.Query(ctx, `SELECT m.partition_id::text, m.transaction_id, m.id::text
		FROM queen.messages m
		JOIN unnest($1::uuid[], $2::text[]) AS k(pid, txid) ON m.partition_id = k.pid AND m.transaction_id = k.txid`,
		itemPIDs, txids)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k dedupKey
		var id string
		if err := rows.Scan(&k.pid, &k.txid, &id); err != nil {
			return nil, err
		}
		existing[k] = id
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	var ins struct {
		id, pid, txid, trace, payload []string
		seq                           []int64
	}
	for i, it := range items {
		pid := itemPIDs[i]
		res := PushResult{Index: i, PartitionID: pid, QueueName: it.Queue, TraceID: it.TraceID}
		id := s.ids.New()
		txid := it.TransactionID
		if txid == "" {
			txid = id
		}
		res.TransactionID = txid
		k := dedupKey{pid, txid}
		if prev, dup := existing[k]; dup {
			if canary.On("dedup-off") {
				res.Status, res.MessageID = "queued", id
				out[i] = res
				continue
			}
			res.Status, res.MessageID = "duplicate", prev
			out[i] = res
			continue
		}
		existing[k] = id
		lastSeq[pid]++
		payload := "null"
		if len(it.Payload) > 0 {
			payload = string(it.Payload)
		}
		ins.id = append(ins.id, id)
		ins.pid = append(ins.pid, pid)
		ins.seq = append(ins.seq, lastSeq[pid])
		ins.txid = append(ins.txid, txid)
		ins.trace = append(ins.trace, it.TraceID)
		ins.payload = append(ins.payload, payload)
		res.Status, res.MessageID = "queued", id
		out[i] = res
	}
	if len(ins.id) == 0 {
		return out, nil
	}
	if stranded {
		// Widen the window between taking a position and committing.
		if _, err := tx.Exec(ctx, `SELECT pg_sleep(random() * 0.2)`); err != nil {
			return nil, err
		}
	}
	upd := struct {
		pid []string
		seq []int64
	}{}
	for pid, seq := range lastSeq {
		upd.pid = append(upd.pid, pid)
		upd.seq = append(upd.seq, seq)
	}
	// One statement appends the rows and moves each partition's allocator.
	_, err = tx.Exec(ctx, `
		WITH appended AS (
			INSERT INTO queen.messages (id, partition_id, seq, transaction_id, trace_id, payload, created_at, producer_sub)
			SELECT id, pid, seq, txid, nullif(trace, '')::uuid, payload::jsonb, $7, nullif($8, '')
			FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::text[], $5::text[], $6::text[])
				AS v(id, pid, seq, txid, trace, payload)
			RETURNING 1
		)
		UPDATE queen.partitions p SET last_seq = GREATEST(p.last_seq, v.seq), last_message_at = $7, last_activity = $7
		FROM unnest($9::uuid[], $10::bigint[]) AS v(pid, seq)
		WHERE p.id = v.pid AND p.last_seq <> v.seq`,
		ins.id, ins.pid, ins.seq, ins.txid, ins.trace, ins.payload, now, producerSub, upd.pid, upd.seq)
	return out, err
}
