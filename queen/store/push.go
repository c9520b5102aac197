package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/crypt"
)

// PushItem is one message to append.
type PushItem struct {
	Queue     string
	Partition string // "" means Default
	// Payload carries whether it is sealed (a spooled push's is, with a
	// key; so is a stored one being pushed again); empty is JSON null.
	Payload       crypt.Payload
	TransactionID string // "" means the new message id
	TraceID       string // "" or a UUID
	// ProducerSub, when set, is this item's producer identity (a spooled
	// push replays with the one stamped at push time); else the call's.
	ProducerSub string
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

// appendSQL appends messages to partitions whose ids are known, in one
// statement, and answers per input row: the message id (new or the stored
// duplicate's) and whether this statement inserted it.
//
// Invariant (cursor order = visibility order): every partition row that gets
// a message is locked FOR NO KEY UPDATE, in id order, and its last_seq
// allocates the new seqs under that lock, held to COMMIT. So within a
// partition a higher seq never becomes visible before a lower one, and a
// reader that sees seq k sees every committed seq below k. (NO KEY UPDATE, not
// UPDATE: a DLQ insert's foreign-key check on the partition does not wait for
// pushes.)
//
// Invariant (exact dedup): (partition_id, transaction_id) is unique, and ON
// CONFLICT DO NOTHING skips a row already stored (or committed by a
// concurrent push while this one waited for the partition lock). Rows not
// inserted are answered by dupLookupSQL, a later statement with a fresh
// snapshot, as "duplicate" with the stored message's id. Duplicates are the
// rare path (client retries), so the common path probes the index once.
//
// Invariant (no phantom backlog): last_seq moves to the highest seq actually
// inserted, never to a seq a conflicting row did not take.
//
// Invariant (no plaintext in an encrypted queue): whether a queue encrypts is
// read here, in the statement that writes, as of its snapshot, never from a
// cache: a configure that committed before the statement started is seen (one
// racing it is not, as for any read of READ COMMITTED). When any row's
// payload is not sealed and its queue has encryption_enabled, the statement
// inserts nothing at all (so a batch is never half committed) and answers
// those rows "needs seal" (the last column); the caller seals them and runs
// the batch again, or refuses it without a key. Only the partition rows are
// locked (OF p): the queue row is read, so concurrent pushes to one queue do
// not queue behind each other.
//
// Seal check ($10): true for every broker append. The SQL surface's push
// (queen.append_rows, which is this statement) passes false: it holds no
// key and stores each payload as its is_encrypted says (contract-admin.md
// 7.1), as it did before it ran this statement.
//
// Lock wait ($9, the combiner's rowLockWait; NULL in a transaction, which keeps
// its own): set in the CTE that locks, as a one-time filter evaluated
// before its first row lock, so a partition held elsewhere fails this
// statement (55P03, nothing written) instead of holding it, and its
// combiner slot, for as long as the holder likes.
const appendSQL = `
WITH input AS (
	SELECT v.id, v.pid, v.txid, v.trace, v.payload, v.sub, v.enc, v.ord
	FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $8::boolean[])
		WITH ORDINALITY AS v(id, pid, txid, trace, payload, sub, enc, ord)
),
locked AS (
	SELECT p.id, p.last_seq, q.encryption_enabled AS seal FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
	WHERE p.id IN (SELECT pid FROM input) AND (SELECT $9::text IS NULL OR set_config('lock_timeout', $9, true) <> '')
	ORDER BY p.id
	FOR NO KEY UPDATE OF p
),
unsealed AS (
	SELECT 1 FROM input i JOIN locked l ON l.id = i.pid WHERE $10::boolean AND l.seal AND NOT i.enc LIMIT 1
),
fresh AS (
	SELECT i.*, l.last_seq + row_number() OVER (PARTITION BY i.pid ORDER BY i.ord) AS seq
	FROM input i JOIN locked l ON l.id = i.pid
	WHERE NOT EXISTS (SELECT 1 FROM unsealed)
),
appended AS (
	INSERT INTO queen.messages (id, partition_id, seq, transaction_id, trace_id, payload, created_at, producer_sub, is_encrypted)
	SELECT id, pid, seq, txid, nullif(trace, '')::uuid, payload::jsonb, coalesce($7::timestamptz, now()), nullif(sub, ''), enc
	FROM fresh
	ON CONFLICT (partition_id, transaction_id) DO NOTHING
	RETURNING id, partition_id, seq
),
advanced AS (
	UPDATE queen.partitions p
	SET last_seq = a.seq, appended = p.appended + a.n,
		last_message_at = coalesce($7::timestamptz, now()), last_activity = coalesce($7::timestamptz, now())
	FROM (SELECT partition_id, max(seq) AS seq, count(*) AS n FROM appended GROUP BY partition_id) a
	WHERE p.id = a.partition_id
	RETURNING p.id
)
SELECT i.ord, i.id::text, a.id IS NOT NULL, (SELECT count(*) FROM advanced), coalesce($10::boolean AND l.seal AND NOT i.enc, false)
FROM input i LEFT JOIN appended a ON a.id = i.id LEFT JOIN locked l ON l.id = i.pid
ORDER BY i.ord`

// appendParams are appendSQL's arguments, $1 to $10.
type appendParams struct {
	IDs, PartitionIDs, TransactionIDs, TraceIDs, Payloads, ProducerSubs []string
	Now                                                                 *time.Time
	Encrypted                                                           []bool
	LockWait                                                            *string
	SealCheck                                                           bool
}

// dupLookupSQL finds the stored rows of the rows appendSQL did not insert:
// a new statement, so its snapshot sees a row a concurrent push committed
// while appendSQL waited.
const dupLookupSQL = `
SELECT v.ord, m.id::text
FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS v(pid, txid, ord)
JOIN queen.messages m ON m.partition_id = v.pid AND m.transaction_id = v.txid`

// strandedSQL is the stranded canary: the reference broker's bug. No
// per-partition serialisation (neither the partition row's lock nor its
// update) and an order fixed when a row is written rather than when it
// commits; run in a transaction of its own (AppendRowsStranded), so the gap
// between taking a position and COMMIT is whatever the COMMIT's way to the
// database takes: the simulator's pg.hold fault widens it.
func strandedSQL(sql string) string {
	out := strings.Replace(sql, `SELECT p.id, p.last_seq, q.encryption_enabled AS seal FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
	WHERE p.id IN (SELECT pid FROM input) AND (SELECT $9::text IS NULL OR set_config('lock_timeout', $9, true) <> '')
	ORDER BY p.id
	FOR NO KEY UPDATE OF p`, `SELECT p.id, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS last_seq, q.encryption_enabled AS seal
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id IN (SELECT pid FROM input) AND ($9::text IS NULL OR true)`, 1)
	from, to := strings.Index(out, "advanced AS ("), strings.Index(out, "RETURNING p.id\n)")
	if out == sql || from < 0 || to < from {
		panic("store: the stranded canary no longer matches appendSQL")
	}
	return out[:from] + "advanced AS (SELECT DISTINCT partition_id AS id FROM appended)" + out[to+len("RETURNING p.id\n)"):]
}

// strandedAdvanceSQL moves the partitions' last_seq after the stranded
// canary's COMMIT, never backwards.
const strandedAdvanceSQL = `
UPDATE queen.partitions p
SET last_seq = greatest(p.last_seq, a.seq), appended = p.appended + a.n,
	last_message_at = coalesce($2::timestamptz, now()), last_activity = coalesce($2::timestamptz, now())
FROM (SELECT partition_id, max(seq) AS seq, count(*) AS n FROM queen.messages WHERE id = ANY($1::uuid[]) GROUP BY partition_id) a
WHERE p.id = a.partition_id`

// AppendRowsStranded is AppendRows as the stranded canary of
// queen/pushpath runs it, the reference broker's way: the append (which
// that canary rewrites, strandedSQL) in an explicit transaction of its own,
// then the partitions' last_seq moved after its COMMIT. Outside that
// canary the move would count the rows twice; nothing else calls it.
func (s *Store) AppendRowsStranded(ctx context.Context, rows []AppendRow) ([]AppendOut, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	out, err := s.appendDistinct(ctx, tx, rows)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	// A repeated row's id was never appended, so moving by every row's id
	// moves what the distinct rows wrote.
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	_, err = s.pool.Exec(ctx, strandedAdvanceSQL, ids, s.dbNow())
	return out, err
}

// AppendRow is one message bound for a known partition (BuildRows makes
// them; AppendRows stores them).
type AppendRow struct {
	id, pid, txid, trace, sub string
	payload                   crypt.Payload
}

// PartitionID is the partition the row goes to: the row lock it waits for.
func (r AppendRow) PartitionID() string { return r.pid }

// AppendOut is one row's outcome (PushAnswers reads it).
type AppendOut struct {
	messageID string
	queued    bool
	// gone: the row's partition no longer exists (deleted since its id
	// was cached); nothing was written for it.
	gone bool
	// needsSeal: the row's queue encrypts and its payload was not sealed;
	// nothing was written for it.
	needsSeal bool
}

// PushAnswers answers the items todo names (rows and res are theirs, in
// order) in out, and returns those whose partition was gone, with an error
// naming the partitions (*GoneError). Whatever else the statement wrote
// is answered: rows in partitions that exist commit whatever others do.
func PushAnswers(items []PushItem, todo []int, rows []AppendRow, res []AppendOut, out []PushResult) ([]int, error) {
	var again []int
	for j, i := range todo {
		if res[j].gone {
			again = append(again, i)
			continue
		}
		out[i] = PushResult{Index: i, Status: "duplicate", MessageID: res[j].messageID, TransactionID: rows[j].txid,
			PartitionID: rows[j].pid, QueueName: items[i].Queue, TraceID: items[i].TraceID}
		if res[j].queued {
			out[i].Status = "queued"
		}
	}
	if gone := goneIDs(rows, res); len(gone) > 0 {
		return again, &GoneError{Partitions: gone, Err: fmt.Errorf("push: partitions deleted while pushing into them")}
	}
	return nil, nil
}

// BuildRows makes the rows AppendRows stores for items whose partitions
// are resolved already (pids[i] is items[i]'s partition id, queen/names
// resolves them): it mints their message ids and seals their payloads. It
// neither combines nor retries.
func (s *Store) BuildRows(ctx context.Context, tenant string, items []PushItem, pids []string, producerSub string) ([]AppendRow, error) {
	rows := make([]AppendRow, len(items))
	for i, it := range items {
		id := s.ids.New()
		txid := it.TransactionID
		if txid == "" {
			txid = id
		}
		sub := producerSub
		if it.ProducerSub != "" {
			sub = it.ProducerSub
		}
		rows[i] = AppendRow{id: id, pid: pids[i], txid: txid, trace: it.TraceID, payload: it.Payload, sub: sub}
	}
	if err := s.sealRows(ctx, tenant, items, rows); err != nil {
		return nil, err
	}
	return rows, nil
}

// AppendRows is one append statement over rows, on a connection of its
// own: rows may repeat a (partition, transactionId) pair (the repeat
// answers duplicate), and it waits at most lockWait for a partition's lock
// (LockWait). It answers only after COMMIT: a queued outcome is durable.
// It neither combines nor retries.
func (s *Store) AppendRows(ctx context.Context, rows []AppendRow, lockWait string) ([]AppendOut, error) {
	return s.appendDistinctWaiting(ctx, s.pool, rows, lockWait)
}

// appendRowsWaiting runs appendSQL on q for rows whose (partition,
// transactionId) pairs are distinct, waiting at most lockWait for a
// partition's lock ("": the session's lock_timeout), and answers one
// outcome per row.
func (s *Store) appendRowsWaiting(ctx context.Context, q querier, rows []AppendRow, lockWait string) ([]AppendOut, error) {
	p := appendParams{Now: s.dbNow(), SealCheck: true}
	if lockWait != "" {
		p.LockWait = &lockWait
	}
	for _, r := range rows {
		p.IDs = append(p.IDs, r.id)
		p.PartitionIDs = append(p.PartitionIDs, r.pid)
		p.TransactionIDs = append(p.TransactionIDs, r.txid)
		p.TraceIDs = append(p.TraceIDs, r.trace)
		p.Payloads = append(p.Payloads, payloadText(r.payload))
		p.ProducerSubs = append(p.ProducerSubs, r.sub)
		p.Encrypted = append(p.Encrypted, r.payload.Sealed())
	}
	res, err := q.Query(ctx, text("append"), argsOf(p)...)
	if err != nil {
		return nil, err
	}
	out := make([]AppendOut, len(rows))
	var raced, unsealed []int
	for res.Next() {
		var ord, advanced int64
		var o AppendOut
		if err := res.Scan(&ord, &o.messageID, &o.queued, &advanced, &o.needsSeal); err != nil {
			res.Close()
			return nil, err
		}
		out[ord-1] = o
		switch {
		case o.needsSeal:
			unsealed = append(unsealed, int(ord-1))
		case !o.queued:
			raced = append(raced, int(ord-1))
		}
	}
	if err := res.Err(); err != nil {
		return nil, err
	}
	if len(unsealed) > 0 {
		// Nothing was written: seal what must be and run the whole batch
		// again.
		return s.appendSealed(ctx, q, rows, unsealed, lockWait)
	}
	if len(raced) > 0 {
		if err := s.lookupDuplicates(ctx, q, rows, raced, out); err != nil {
			return nil, err
		}
	}
	if canary.On("dedup-off") {
		for i := range out {
			out[i] = AppendOut{messageID: rows[i].id, queued: true}
		}
	}
	return out, nil
}

// appendSealed seals the rows appendSQL found unsealed for a queue that
// encrypts (the hint that decides sealing up front was stale: encryption was
// turned on from another broker) and appends the whole batch again; the first
// statement wrote nothing. A broker without a key cannot: the write is
// refused, never stored in the clear.
func (s *Store) appendSealed(ctx context.Context, q querier, rows []AppendRow, idx []int, lockWait string) ([]AppendOut, error) {
	if s.cipher == nil {
		r := rows[idx[0]]
		return nil, &RefusedError{Reason: fmt.Sprintf("partition %s (transactionId %s): the queue has encryptionEnabled and this broker has no QUEEN_ENCRYPTION_KEY", r.pid, r.txid)}
	}
	again := append([]AppendRow(nil), rows...)
	for _, i := range idx {
		sealed, err := s.cipher.SealPayload(rows[i].payload)
		if err != nil {
			return nil, err
		}
		again[i].payload = sealed
	}
	s.sealed.Clear()
	return s.appendRowsWaiting(ctx, q, again, lockWait)
}

// payloadText is a payload as appendSQL takes it: an empty one is JSON null.
func payloadText(p crypt.Payload) string {
	if p.Empty() {
		return "null"
	}
	return string(p.Raw())
}

// lookupDuplicates answers the rows appendSQL did not insert: their
// (partition, transactionId) is stored already, or their partition is gone.
func (s *Store) lookupDuplicates(ctx context.Context, q querier, rows []AppendRow, raced []int, out []AppendOut) error {
	pids, txids := make([]string, len(raced)), make([]string, len(raced))
	for j, i := range raced {
		pids[j], txids[j] = rows[i].pid, rows[i].txid
	}
	res, err := q.Query(ctx, dupLookupSQL, pids, txids)
	if err != nil {
		return err
	}
	defer res.Close()
	for _, i := range raced {
		// Neither inserted nor stored: the partition row is gone (appendSQL
		// joins it), unless the lookup below finds the row.
		out[i] = AppendOut{gone: true}
	}
	for res.Next() {
		var ord int64
		var id string
		if err := res.Scan(&ord, &id); err != nil {
			return err
		}
		out[raced[ord-1]] = AppendOut{messageID: id}
	}
	return res.Err()
}

// appendDistinct runs appendSQL over rows that may repeat a (partition,
// transactionId) pair: a repeat is answered as a duplicate of the first.
func (s *Store) appendDistinct(ctx context.Context, q querier, rows []AppendRow) ([]AppendOut, error) {
	return s.appendDistinctWaiting(ctx, q, rows, "")
}

// appendDistinctWaiting is appendDistinct waiting at most lockWait for a
// partition's lock ("": the session's lock_timeout).
func (s *Store) appendDistinctWaiting(ctx context.Context, q querier, rows []AppendRow, lockWait string) ([]AppendOut, error) {
	type key struct{ pid, txid string }
	first := make(map[key]int, len(rows))
	alias := make([]int, len(rows))
	uniq := make([]AppendRow, 0, len(rows))
	for i, r := range rows {
		k := key{r.pid, r.txid}
		if j, ok := first[k]; ok {
			alias[i] = j
			continue
		}
		first[k] = len(uniq)
		alias[i] = len(uniq)
		uniq = append(uniq, r)
	}
	res, err := s.appendRowsWaiting(ctx, q, uniq, lockWait)
	if err != nil {
		return nil, err
	}
	out := make([]AppendOut, len(rows))
	taken := make([]bool, len(uniq))
	for i := range rows {
		j := alias[i]
		out[i] = res[j]
		switch {
		case taken[j] && canary.On("dedup-off"):
			out[i] = AppendOut{messageID: rows[i].id, queued: true}
		case taken[j]:
			out[i].queued = false
		}
		taken[j] = true
	}
	return out, nil
}
