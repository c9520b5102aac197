package store

import (
	"context"
	"github.com/queen-go/queen/queen/canary"
	"time"

	"github.com/jackc/pgx/v5"
)

// TxnOp is one operation of an atomic transaction: a push of Items, or one
// Ack for Group.
type TxnOp struct {
	Type  string // push or ack
	Items []PushItem
	Ack   AckItem
	Group string
}

// TxnResult is the outcome of one pushed item or one ack.
type TxnResult struct {
	Index         int
	Type          string
	Success       bool
	TransactionID string
	MessageID     string
	PartitionID   string
	QueueName     string
	Duplicate     bool
	Error         string
	DLQ           bool
}

// Transaction applies ops all-or-nothing. Every lease in requiredLeases must
// be live (and the tenant's) or nothing is written. A business failure comes
// back as an error for which IsRollback is true; the caller answers
// success:false. A push of an existing transactionId is reported duplicate
// and does not abort the transaction, so a retried transaction is safe.
func (s *Store) Transaction(ctx context.Context, tenant string, ops []TxnOp, requiredLeases []string, producerSub string) ([]TxnResult, error) {
	var out []TxnResult
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		out = out[:0]
		for _, lease := range requiredLeases {
			var live bool
			if err := tx.QueryRow(ctx, `
				SELECT EXISTS (SELECT 1 FROM queen.partition_consumers pc
					JOIN queen.partitions p ON p.id = pc.partition_id
					JOIN queen.queues q ON q.id = p.queue_id
					WHERE pc.worker_id = $1 AND pc.lease_expires_at > $2 AND q.tenant_id = $3)`,
				lease, now, tenant).Scan(&live); err != nil {
				return err
			}
			if !live {
				return rollback("lease %s is invalid or expired", lease)
			}
		}
		for i, op := range ops {
			switch op.Type {
			case "push":
				pushTenant := tenant
				if canary.On("tenant-dropped") {
					pushTenant = DefaultTenant
				}
				res, err := s.pushTx(ctx, tx, now, pushTenant, op.Items, producerSub)
				if err != nil {
					return err
				}
				for _, r := range res {
					out = append(out, TxnResult{Index: i, Type: "push", Success: true, TransactionID: r.TransactionID,
						MessageID: r.MessageID, PartitionID: r.PartitionID, QueueName: r.QueueName,
						Duplicate: r.Status == "duplicate"})
				}
			case "ack":
				a := op.Ack
				if a.LeaseID == "" && len(requiredLeases) == 1 {
					a.LeaseID = requiredLeases[0]
				}
				res, err := ackTx(ctx, tx, now, tenant, op.Group, []AckItem{a}, true)
				if err != nil {
					return err
				}
				out = append(out, TxnResult{Index: i, Type: "ack", Success: true, TransactionID: a.TransactionID,
					PartitionID: a.PartitionID, QueueName: res[0].QueueName, DLQ: res[0].DLQ})
			default:
				return rollback("operations[%d]: unknown type %q", i, op.Type)
			}
		}
		return nil
	})
	return out, err
}
