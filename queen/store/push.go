package store

import (
	"context"
	"fmt"
	"strings"
	"time"

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
	// Epoch is the placement epoch the router found the queue at (shards
	// configured); 0, without shards or for a spooled push replayed,
	// checks nothing. Never on the wire nor in the spool.
	Epoch int64
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
// Fence ($11, one epoch per row; NULL without shards, which checks nothing):
// the epoch each row's queue was routed with. A locked partition row whose
// epoch differs (the queue moved, or is frozen: -E) calls queen.fence_moved,
// which fails the statement with SQLSTATE QF001 (ErrMoved), nothing written.
// It is in the locking scan's WHERE, so a push that waited behind a freeze
// is rechecked against the frozen row version and fails too.
//
// Lock wait ($9, the combiner's rowLockWait; NULL in a transaction, which keeps
// its own): set in the CTE that locks, as a one-time filter evaluated
// before its first row lock, so a partition held elsewhere fails this
// statement (55P03, nothing written) instead of holding it, and its
// combiner slot, for as long as the holder likes.
const appendSQL = `
WITH input AS (
	SELECT v.id, v.pid, v.txid, v.trace, v.payload, v.sub, v.enc, v.ord, v.epoch
	FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $8::boolean[], $11::bigint[])
		WITH ORDINALITY AS v(id, pid, txid, trace, payload, sub, enc, epoch, ord)
),
locked AS (
	SELECT p.id, p.last_seq, q.encryption_enabled AS seal FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
	WHERE p.id IN (SELECT pid FROM input) AND (SELECT $9::text IS NULL OR set_config('lock_timeout', $9, true) <> '')
	AND ($11::bigint[] IS NULL OR p.epoch = ALL (SELECT i.epoch FROM input i WHERE i.pid = p.id) OR queen.fence_moved(p.queue_id))
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

// appendParams are appendSQL's arguments, $1 to $11.
type appendParams struct {
	IDs, PartitionIDs, TransactionIDs, TraceIDs, Payloads, ProducerSubs []string
	Now                                                                 *time.Time
	Encrypted                                                           []bool
	LockWait                                                            *string
	SealCheck                                                           bool
	Epochs                                                              []int64
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
// commits; run in a transaction of its own (queen/pushpath's stranded
// append, then AdvanceStranded), so the gap
// between taking a position and COMMIT is whatever the COMMIT's way to the
// database takes: the simulator's pg.hold fault widens it.
func strandedSQL(sql string) string {
	out := strings.Replace(sql, `SELECT p.id, p.last_seq, q.encryption_enabled AS seal FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
	WHERE p.id IN (SELECT pid FROM input) AND (SELECT $9::text IS NULL OR set_config('lock_timeout', $9, true) <> '')
	AND ($11::bigint[] IS NULL OR p.epoch = ALL (SELECT i.epoch FROM input i WHERE i.pid = p.id) OR queen.fence_moved(p.queue_id))
	ORDER BY p.id
	FOR NO KEY UPDATE OF p`, `SELECT p.id, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS last_seq, q.encryption_enabled AS seal
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id IN (SELECT pid FROM input) AND ($9::text IS NULL OR true) AND ($11::bigint[] IS NULL OR true)`, 1)
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

// AdvanceStranded runs strandedAdvanceSQL over rows, on the pool: the
// second half of the append as the stranded canary of queen/pushpath runs
// it, the reference broker's way (the append, which that canary rewrites,
// strandedSQL, committed in an explicit transaction of its own, then the
// partitions' last_seq moved after its COMMIT). Outside that canary the
// move would count the rows twice; nothing else calls it.
func (s *Store) AdvanceStranded(ctx context.Context, rows []AppendRow) error {
	// A repeated row's id was never appended, so moving by every row's id
	// moves what the distinct rows wrote.
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	_, err := s.pool.Exec(ctx, strandedAdvanceSQL, ids, s.dbNow())
	return err
}

// AppendRow is one message bound for a known partition (NewRows makes
// them; AppendRows stores them).
type AppendRow struct {
	id, pid, txid, trace, sub string
	payload                   crypt.Payload
	epoch                     int64 // its item's Epoch
}

// PartitionID is the partition the row goes to: the row lock it waits for.
func (r AppendRow) PartitionID() string { return r.pid }

// ID is the message id minted for the row.
func (r AppendRow) ID() string { return r.id }

// Payload is the row's payload, as it will be stored.
func (r AppendRow) Payload() crypt.Payload { return r.payload }

// WithPayload is the row with payload p instead (sealed, or opened, by the
// write policy).
func (r AppendRow) WithPayload(p crypt.Payload) AppendRow {
	r.payload = p
	return r
}

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

// NeedsSeal reports that the row's queue encrypts and its payload was not
// sealed: the statement wrote nothing at all.
func (o AppendOut) NeedsSeal() bool { return o.needsSeal }

// AsDuplicate is o answered as a duplicate (a repeat of a row earlier in
// the same append): the same message id, not queued.
func (o AppendOut) AsDuplicate() AppendOut {
	o.queued = false
	return o
}

// QueuedAs is the outcome "queued as message id": what the dedup-off canary
// answers for every row, a repeat included.
func QueuedAs(messageID string) AppendOut { return AppendOut{messageID: messageID, queued: true} }

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
	if gone := GoneIDs(rows, res); len(gone) > 0 {
		return again, &GoneError{Partitions: gone, Err: fmt.Errorf("push: partitions deleted while pushing into them")}
	}
	return nil, nil
}

// NewRows makes the rows AppendRows stores for items whose partitions are
// resolved already (pids[i] is items[i]'s partition id, queen/names
// resolves them): it mints their message ids. Their payloads are the
// items' as they came: the write policy (queen/writes' BuildRows) seals
// them. It neither combines nor retries.
func (s *Store) NewRows(items []PushItem, pids []string, producerSub string) []AppendRow {
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
		rows[i] = AppendRow{id: id, pid: pids[i], txid: txid, trace: it.TraceID, payload: it.Payload, sub: sub, epoch: it.Epoch}
	}
	return rows
}

// AppendRowsParams are AppendRows' arguments: the rows, whose (partition,
// transactionId) pairs are distinct, and how long to wait at most for a
// partition's lock ("": the session's lock_timeout; LockWait).
//
// Epochs, when set (shards configured), holds per row the placement epoch its
// queue was routed with; a row whose partition is at another epoch fails
// the whole statement with a *MovedError, nothing written. nil (no shards)
// checks nothing and costs nothing. Left nil, it is the rows' own epochs
// (their items' Epoch), nil when none has one.
type AppendRowsParams struct {
	Rows     []AppendRow
	LockWait string
	Epochs   []int64
}

// rowEpochs are rows' routed epochs, nil when none has one (no shards:
// no allocation).
func rowEpochs(rows []AppendRow) []int64 {
	var epochs []int64
	for i, r := range rows {
		if r.epoch != 0 && epochs == nil {
			epochs = make([]int64, len(rows))
		}
		if epochs != nil {
			epochs[i] = r.epoch
		}
	}
	return epochs
}

// AppendRows runs appendSQL on q and answers one outcome per row. When a
// row needs sealing (AppendOut.NeedsSeal) nothing was written and the
// others' outcomes are empty; otherwise a row not inserted is looked up
// (dupLookupSQL): a duplicate with the stored message's id, or gone. It
// neither seals, deduplicates, combines nor retries: that is the write
// policy's (queen/writes) and queen/pushpath's.
func (s *Store) AppendRows(ctx context.Context, q Executor, p AppendRowsParams) ([]AppendOut, error) {
	rows := p.Rows
	args := appendParams{Now: s.dbNow(), SealCheck: true, Epochs: p.Epochs}
	if args.Epochs == nil {
		args.Epochs = rowEpochs(rows)
	}
	if p.LockWait != "" {
		args.LockWait = &p.LockWait
	}
	for _, r := range rows {
		args.IDs = append(args.IDs, r.id)
		args.PartitionIDs = append(args.PartitionIDs, r.pid)
		args.TransactionIDs = append(args.TransactionIDs, r.txid)
		args.TraceIDs = append(args.TraceIDs, r.trace)
		args.Payloads = append(args.Payloads, payloadText(r.payload))
		args.ProducerSubs = append(args.ProducerSubs, r.sub)
		args.Encrypted = append(args.Encrypted, r.payload.Sealed())
	}
	res, err := q.Query(ctx, text("append"), argsOf(args)...)
	if err != nil {
		return nil, movedOr(err)
	}
	out := make([]AppendOut, len(rows))
	var raced []int
	unsealed := false
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
			unsealed = true
		case !o.queued:
			raced = append(raced, int(ord-1))
		}
	}
	if err := res.Err(); err != nil {
		return nil, movedOr(err)
	}
	if unsealed {
		// Nothing was written: the policy seals and runs it again.
		return out, nil
	}
	if len(raced) > 0 {
		if err := s.lookupDuplicates(ctx, q, rows, raced, out); err != nil {
			return nil, err
		}
	}
	return out, nil
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
