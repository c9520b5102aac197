package pushpath

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/store"
)

// RetryMessage gives a dead-lettered message another life: its DLQ row is
// read (store.ReadDeadLetter), its item's row made as a push's (pushRows),
// and in one transaction the DLQ row is deleted and the row appended
// through the write policy. It is no push of the combiner and never goes
// to the spool. A stale cached partition id is forgotten and the retry run
// again (names.Retry); a partition deleted meanwhile is a
// *store.GoneError, and nothing is written. epoch is the placement epoch
// of the message's queue (0: none, without shards): the append carries
// it, so a queue frozen or moved meanwhile fails it as store.ErrMoved and
// the DLQ row stays.
func (p *Path) RetryMessage(ctx context.Context, tenant, partitionID, txid string, epoch int64) (store.Retried, error) {
	return names.Retry(p.o.Names, func() (store.Retried, error) {
		d, err := p.o.Store.ReadDeadLetter(ctx, tenant, partitionID, txid)
		if err != nil {
			return d.Retried, err
		}
		d.Item.Epoch = epoch
		rows, err := pushRows(ctx, p.o.Names, p.o.Writes, tenant, []store.PushItem{d.Item}, "")
		if err != nil {
			return d.Retried, err
		}
		return p.retryDeadLetter(ctx, d, rows)
	})
}

// retryDeadLetter deletes d's DLQ row and appends rows (d.Item's) in one
// transaction.
func (p *Path) retryDeadLetter(ctx context.Context, d store.DeadLetter, rows []store.AppendRow) (store.Retried, error) {
	st := p.o.Store
	r := d.Retried
	ctx, cancel := st.Bound(ctx)
	defer cancel()
	err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
		if err := st.DeleteDeadLetter(ctx, tx, d); err != nil {
			return err
		}
		out, err := p.o.Writes.Append(ctx, tx, rows, "")
		if err != nil {
			return err
		}
		if gone := store.GoneIDs(rows, out); len(gone) > 0 {
			return &store.GoneError{Partitions: gone, Err: fmt.Errorf("the message's partition was deleted during the retry")}
		}
		r.MessageID, r.Duplicate, r.PartitionID = out[0].MessageID(), !out[0].Queued(), rows[0].PartitionID()
		return nil
	})
	return r, err
}
