package store

import (
	"context"
	"fmt"
	"math"
	"time"
)

// popManySQL is popOneSQL for several pops of one queue and group at once,
// $3 of them, each a claim of one partition: one scan of the group's
// cursors claims up to $3 partitions, each gives up to $4 messages within
// the byte budget $9, and the partition of claim rank k is leased under
// the k-th token of $5 (text[]), so each pop holds its own lease and
// answers only its own partition. Its invariants are popOneSQL's, per
// partition (TestOnePartitionPopAgreesWithTheGeneralPop holds n combined
// pops to n single ones run in turn); what it saves is the
// candidate scan, the round trip and the commit, once for all its pops.
var popManySQL = popClaimSQL + popClaimedRankedSQL + `
picked AS (
	SELECT c.partition_id, c.name, c.retries, c.rank, m.id, m.transaction_id, m.trace_id, m.payload, m.is_encrypted,
		m.producer_sub, m.created_at, m.seq
	FROM claimed c` + popPickOwnSQL + `
),
per_partition AS (
	SELECT partition_id, min(rank) AS rank, count(*) AS n, max(seq) AS last_seq,
		(array_agg(id ORDER BY seq DESC))[1] AS last_id,
		(array_agg(created_at ORDER BY seq DESC))[1] AS last_created
	FROM picked GROUP BY partition_id
),` + popLease(`($5::text[])[s.rank]`, true) + `
ORDER BY l.rank, p.seq`

// popManyParams are popManySQL's arguments, $1 to $10: popParams with one
// lease token per pop.
type popManyParams struct {
	QueueID      string
	Group        string
	Pops         int
	Batch        int
	LeaseIDs     []string
	LeaseSeconds int
	AutoAck      bool
	Now          *time.Time
	MaxBytes     int64
	Epoch        *int64
}

// RunPopMany runs n wildcard pops of one partition each, all of in's
// queue, group, batch, lease, autoAck and byte budget, as one statement
// (popManySQL), and answers n PopRows: the k-th pop's partition and its
// own lease token, or no rows when fewer than n partitions were claimable.
// in.Partition and in.Partitions are ignored (every pop is a wildcard pop
// of one partition).
func (s *Store) RunPopMany(ctx context.Context, in PopParams, n int) ([]PopRows, error) {
	p := popManyParams{QueueID: in.QueueID, Group: in.Group, Pops: n, Batch: in.Batch, LeaseSeconds: in.LeaseSeconds,
		AutoAck: in.AutoAck, Now: in.Now, MaxBytes: in.MaxBytes, LeaseIDs: make([]string, n), Epoch: in.Epoch}
	if p.MaxBytes <= 0 {
		p.MaxBytes = math.MaxInt64
	}
	out := make([]PopRows, n)
	for i := range p.LeaseIDs {
		p.LeaseIDs[i] = s.ids.New()
		out[i].LeaseID = p.LeaseIDs[i]
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, text("pop.many"), argsOf(p)...)
	if err != nil {
		return nil, movedOr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var rank int64
		r, err := scanPopRow(rows, &rank)
		if err != nil {
			return nil, err
		}
		if rank < 1 || rank > int64(n) {
			return nil, fmt.Errorf("pop many: claim rank %d of %d pops", rank, n)
		}
		out[rank-1].Rows = append(out[rank-1].Rows, r)
	}
	return out, movedOr(rows.Err())
}
