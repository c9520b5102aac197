package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements a transaction composes (queen/txn runs them, in one pgx
// transaction it begins itself): the cursor lock and the KV operations;
// the append and the timers go through the write policy (queen/writes'
// AppendInTx and ApplyTimers), its acks are queen/consume's (AckStrictInTx,
// over AckRead and AckWrite). Each runs on the transaction it is handed;
// none begins, retries or decides anything. The rollback errors serve
// queen/streams' cycle too.

// txnLockSQL locks, before anything else in a transaction, every cursor row
// it relies on: the rows holding its requiredLeases and the rows its acks
// will move, in (partition, group) order. Cursor rows first, partition rows
// (appendSQL) after, is the one global lock order, so concurrent
// transactions cannot deadlock; and a required lease cannot expire into
// someone else's hands, or be acked away, while the transaction runs.
const txnLockSQL = `
SELECT pc.worker_id, pc.worker_id = ANY($1::text[]) AND pc.lease_expires_at > coalesce($5::timestamptz, now())
	AND q.tenant_id = $4::uuid
FROM queen.partition_consumers pc
JOIN queen.queues q ON q.id = pc.queue_id
WHERE pc.worker_id = ANY($1::text[])
	OR (pc.partition_id, pc.consumer_group) IN (SELECT * FROM unnest($2::uuid[], $3::text[]))
ORDER BY pc.partition_id, pc.consumer_group
FOR UPDATE OF pc`

// TxnLockParams are txnLockSQL's arguments, $1 to $5. LockTxnCursors sets
// Now (the injected database instant); the caller's value is ignored.
type TxnLockParams struct {
	Leases       []string // the transaction's requiredLeases
	PartitionIDs []string // with Groups: the cursor rows its acks move
	Groups       []string
	Tenant       string
	Now          *time.Time
}

// LockTxnCursors runs txnLockSQL in tx and answers the leases among
// p.Leases that are live, in database time, on a cursor of p.Tenant's.
func (s *Store) LockTxnCursors(ctx context.Context, tx pgx.Tx, p TxnLockParams) (map[string]bool, error) {
	p.Now = s.dbNow()
	rows, err := tx.Query(ctx, text("txn.lock"), argsOf(p)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	held := map[string]bool{}
	for rows.Next() {
		var worker *string
		var holds *bool
		if err := rows.Scan(&worker, &holds); err != nil {
			return nil, err
		}
		if worker != nil && holds != nil && *holds {
			held[*worker] = true
		}
	}
	return held, rows.Err()
}

// ApplyKVInTx is ApplyKV inside tx: a lost Required precondition is a
// *KVPrecondition, too large a read ErrKVReadTooLarge; tx must then roll
// back.
func (s *Store) ApplyKVInTx(ctx context.Context, tx pgx.Tx, tenant string, ops []KVOp, maxRead int) ([]KVResult, error) {
	return s.applyKV(ctx, tx, tenant, ops, maxRead)
}

// Rejected is a business failure that rolls a transaction back, with its
// failure code (bad_request, ack_rejected, push_rejected): IsRollback and
// RollbackReason read it.
func Rejected(reason, format string, a ...any) error { return rejected(reason, format, a...) }

// Rollback is a business failure that rolls a transaction back, without a
// failure code (a streams cycle's): IsRollback reads it.
func Rollback(msg string) error { return rollback("%s", msg) }

// TransactionID is the row's transactionId (the given one, or its message
// id).
func (r AppendRow) TransactionID() string { return r.txid }

// MessageID is the id of the message stored under the row's
// (partition, transactionId): the row's own, or the earlier one's.
func (o AppendOut) MessageID() string { return o.messageID }

// Queued reports whether the row was stored (false: a duplicate).
func (o AppendOut) Queued() bool { return o.queued }
