package httpapi

// The answers of the consumer-group routes (groups.go), in the shapes
// Queen's CLI and clients read (contract-admin.md section 2).

// adminTimeLayout is the admin rows' timestamp format: milliseconds, UTC.
const adminTimeLayout = "2006-01-02T15:04:05.000Z"

// consumerGroupRow is one (group, queue) of GET /api/v1/consumer-groups.
type consumerGroupRow struct {
	Name              string   `json:"name"`
	QueueName         string   `json:"queueName"`
	Topics            []string `json:"topics"`  // the queue alone
	Members           int      `json:"members"` // partitions with a cursor of the group
	PartitionsWithLag int      `json:"partitionsWithLag"`
	TotalLag          *int64   `json:"totalLag"`   // always null, as Queen reports it
	MaxTimeLag        int64    `json:"maxTimeLag"` // seconds, as LagSeconds
	LagSeconds        int64    `json:"lagSeconds"`
	LagMessages       int64    `json:"lagMessages"`
	State             string   `json:"state"` // Stable, Lagging or Dead
	// queenctl's cg list reads these names.
	Queue      string `json:"queue"`
	Partitions int    `json:"partitions"` // as Members
	// SubscriptionMode is null for an "all" group, whose subscription
	// instants are then null too.
	SubscriptionMode      *string `json:"subscriptionMode"`
	SubscriptionTimestamp *string `json:"subscriptionTimestamp"`
	SubscriptionCreatedAt *string `json:"subscriptionCreatedAt"`
}

// laggingCursor is one (group, partition) of GET
// /api/v1/consumer-groups/lagging, in Queen's snake-case names and the
// camel-case ones queenctl's lag view reads.
type laggingCursor struct {
	ConsumerGroup      string  `json:"consumer_group"`
	QueueName          string  `json:"queue_name"`
	PartitionName      string  `json:"partition_name"`
	PartitionID        string  `json:"partition_id"`
	WorkerID           *string `json:"worker_id"` // null without a live lease
	OffsetLag          int64   `json:"offset_lag"`
	TimeLagSeconds     int64   `json:"time_lag_seconds"`
	LagHours           float64 `json:"lag_hours"` // rounded down to hundredths
	OldestUnconsumedAt *string `json:"oldest_unconsumed_at"`
	LastConsumedAt     *string `json:"last_consumed_at"` // null before the first ack
	Name               string  `json:"name"`
	Queue              string  `json:"queue"`
	LagSeconds         int64   `json:"lagSeconds"`
	LagMessages        int64   `json:"lagMessages"`
}

// groupQueueCursors are one queue's cursors in GET
// /api/v1/consumer-groups/{group}, whose answer maps each queue name to
// them.
type groupQueueCursors struct {
	Partitions []groupCursor `json:"partitions"`
}

// groupCursor is a group's cursor on one partition.
type groupCursor struct {
	Partition      string  `json:"partition"`
	WorkerID       *string `json:"workerId"` // null without a live lease
	LastConsumedAt *string `json:"lastConsumedAt"`
	TotalConsumed  int64   `json:"totalConsumed"`
	OffsetLag      int64   `json:"offsetLag"`
	TimeLagSeconds int64   `json:"timeLagSeconds"`
	LeaseActive    bool    `json:"leaseActive"`
}

// groupDeleted is DELETE /api/v1/consumer-groups/{group}[/queues/{queue}]'s
// answer.
type groupDeleted struct {
	Success           bool    `json:"success"` // always true
	ConsumerGroup     string  `json:"consumerGroup"`
	DeletedPartitions int     `json:"deletedPartitions"` // cursors removed
	MetadataDeleted   bool    `json:"metadataDeleted"`
	QueueName         *string `json:"queueName,omitempty"` // only when one queue was named
}

// groupSeeked is POST .../queues/{queue}/seek's answer.
type groupSeeked struct {
	Success           bool    `json:"success"` // always true
	ConsumerGroup     string  `json:"consumerGroup"`
	QueueName         string  `json:"queueName"`
	SeekToEnd         bool    `json:"seekToEnd"`
	TargetTimestamp   *string `json:"targetTimestamp"` // null for a seek to the end
	PartitionsUpdated int     `json:"partitionsUpdated"`
}

// partitionSeeked is POST .../partitions/{partition}/seek's answer.
type partitionSeeked struct {
	Success       bool    `json:"success"` // always true
	ConsumerGroup string  `json:"consumerGroup"`
	QueueName     string  `json:"queueName"`
	PartitionName string  `json:"partitionName"`
	Updated       bool    `json:"updated"`       // a cursor moved
	CursorMovedTo *string `json:"cursorMovedTo"` // when the message the cursor now stands on was stored; null when none moved
}

// failureAnswer is a refusal in Queen's {"success":false,"error"} shape
// (a partition seek's 404, a trace for a message that is not there), not
// the usual {"error"}.
type failureAnswer struct {
	Success bool   `json:"success"` // always false
	Error   string `json:"error"`
}

// subscriptionSet is POST /api/v1/consumer-groups/{group}/subscription's
// answer.
type subscriptionSet struct {
	Success       bool   `json:"success"` // always true
	ConsumerGroup string `json:"consumerGroup"`
	NewTimestamp  string `json:"newTimestamp"` // as given in the request
	RowsUpdated   int64  `json:"rowsUpdated"`
}

// statsRefreshed is POST /api/v1/stats/refresh's answer.
type statsRefreshed struct {
	Skipped bool   `json:"skipped"` // always false
	Live    bool   `json:"live"`    // always true: figures are computed on read
	Message string `json:"message"`
}
