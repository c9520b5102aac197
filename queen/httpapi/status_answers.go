package httpapi

// The answers of the status and resource views (status.go), typed so the
// wire contract (contract-admin.md section 4) is readable here. Several
// figures appear twice under two names (name and queue, partitions and
// partitionCount, ...) because Queen's dashboard and queenctl each read
// one of them; fields always 0 are series this broker does not record.

// statusAnswer is GET /api/v1/status.
type statusAnswer struct {
	TimeRange       timeRange         `json:"timeRange"`
	BucketMinutes   int               `json:"bucketMinutes"`
	PointCount      int               `json:"pointCount"` // len(Throughput)
	Throughput      []throughputPoint `json:"throughput"` // newest first
	Queues          []statusQueueRow  `json:"queues"`     // the queues holding messages
	Messages        statusMessages    `json:"messages"`
	Leases          leaseSummary      `json:"leases"`
	DeadLetterQueue deadLetterSummary `json:"deadLetterQueue"`
	Workers         []workerRow       `json:"workers"`
	Errors          statusErrors      `json:"errors"`
	// StatsAge is the age in seconds of the oldest figure in the answer,
	// QueueStatsAge that of the queue snapshot; -1 when there is none.
	StatsAge      float64 `json:"statsAge"`
	QueueStatsAge float64 `json:"queueStatsAge"`
}

// timeRange is the window an answer covers.
type timeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// statusMessages are the tenant's message counts in /status.
type statusMessages struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`
	Processing int   `json:"processing"` // always 0
	Completed  int64 `json:"completed"`
	Failed     int   `json:"failed"` // always 0: a failed message is retried or dead-lettered
	DeadLetter int64 `json:"deadLetter"`
	// Requests are this broker's own request counts since it started.
	Requests        requestsByKind  `json:"requests"`
	BatchEfficiency batchEfficiency `json:"batchEfficiency"`
}

// requestsByKind are push, pop and ack request counts.
type requestsByKind struct {
	Push int64 `json:"push"`
	Pop  int64 `json:"pop"`
	Ack  int64 `json:"ack"`
}

// batchEfficiency is messages per request over the window: per push, per
// pop (empty pops included) and per ack request (autoAck pops send none).
type batchEfficiency struct {
	Push float64 `json:"push"`
	Pop  float64 `json:"pop"`
	Ack  float64 `json:"ack"`
}

// leaseSummary sums the tenant's live leases.
type leaseSummary struct {
	Active               int64 `json:"active"`
	PartitionsWithLeases int64 `json:"partitionsWithLeases"`
	TotalBatchSize       int64 `json:"totalBatchSize"`
	TotalAcked           int64 `json:"totalAcked"`
}

// deadLetterSummary is the tenant's dead-letter queue in /status.
type deadLetterSummary struct {
	TotalMessages      int64        `json:"totalMessages"`
	AffectedPartitions int64        `json:"affectedPartitions"`
	TopErrors          []errorCount `json:"topErrors"`
}

// errorCount is one error message and how many dead letters carry it.
type errorCount struct {
	Error string `json:"error"`
	Count int64  `json:"count"`
}

// workerRow is one broker that recorded minutes in the window.
type workerRow struct {
	Hostname string `json:"hostname"`
	Port     int    `json:"port"`
	WorkerID string `json:"workerId"`
	Requests int64  `json:"requests"`
	LastSeen string `json:"lastSeen"` // its last recorded minute
	workerGauges
}

// statusErrors are the window's error counts.
type statusErrors struct {
	DBErrors    int64 `json:"dbErrors"`
	AckFailed   int64 `json:"ackFailed"`
	DLQMessages int64 `json:"dlqMessages"` // the dead-letter queue now, not the window's
}

// throughputPoint is one bucket of status.throughput: the tenant's queue
// figures with the brokers' own.
type throughputPoint struct {
	Timestamp          string  `json:"timestamp"`
	Ingested           int64   `json:"ingested"`
	Processed          int64   `json:"processed"`
	PopMessages        int64   `json:"popMessages"`
	IngestedPerSecond  float64 `json:"ingestedPerSecond"`
	ProcessedPerSecond float64 `json:"processedPerSecond"`
	PopPerSecond       float64 `json:"popPerSecond"`
	AvgLagMs           float64 `json:"avgLagMs"`
	MaxLagMs           int64   `json:"maxLagMs"`
	AvgEventLoopLagMs  int     `json:"avgEventLoopLagMs"` // always 0: not recorded
	MaxEventLoopLagMs  int     `json:"maxEventLoopLagMs"` // always 0
	MinFreeSlots       int     `json:"minFreeSlots"`      // always 0
	DBErrors           int64   `json:"dbErrors"`
	AckFailed          int64   `json:"ackFailed"`
	DLQCount           int64   `json:"dlqCount"`
	// The CPU figures are percents of one core, the brokers' mean; the
	// pool and memory figures are summed over the brokers.
	QueenCPUUserPct float64 `json:"queenCpuUserPct"`
	QueenCPUSysPct  float64 `json:"queenCpuSysPct"`
	QueenRssMb      float64 `json:"queenRssMb"`
	DBPoolActive    float64 `json:"dbPoolActive"`
	DBPoolIdle      float64 `json:"dbPoolIdle"`
	DBPoolSize      float64 `json:"dbPoolSize"`
	AvgLatencyMs    float64 `json:"avgLatencyMs"`
	P99LatencyMs    float64 `json:"p99LatencyMs"`
}

// queueSummary is one queue of /status/queues (and of /status, there as
// statusQueueRow).
type queueSummary struct {
	ID             string             `json:"id"`
	Name           string             `json:"name"`
	Queue          string             `json:"queue"` // Name again
	Namespace      *string            `json:"namespace"`
	Task           *string            `json:"task"`
	CreatedAt      string             `json:"createdAt"`
	Partitions     int                `json:"partitions"`
	PartitionCount int                `json:"partitionCount"`
	Messages       queueSummaryCounts `json:"messages"`
	Pending        int64              `json:"pending"`
	Completed      int64              `json:"completed"`
	DLQ            int64              `json:"dlq"`
}

// queueSummaryCounts are a queue's message counts in queueSummary.
type queueSummaryCounts struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`
	Processing int   `json:"processing"` // always 0 here
}

// statusQueueRow is a queue in /status: queueSummary and what its
// consumers took.
type statusQueueRow struct {
	queueSummary
	TotalConsumed int64 `json:"totalConsumed"`
}

// statusQueuesAnswer is GET /api/v1/status/queues.
type statusQueuesAnswer struct {
	Queues     []queueSummary `json:"queues"`
	Pagination pagination     `json:"pagination"`
}

// pagination echoes the page asked for.
type pagination struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// queueStatus is GET /api/v1/status/queues/{queue}.
type queueStatus struct {
	// The flat figures are what queenctl's status <queue> reads.
	Name       string            `json:"name"`
	Pending    int64             `json:"pending"`
	Processing int64             `json:"processing"`
	Completed  int64             `json:"completed"`
	Failed     int               `json:"failed"` // always 0
	DLQ        int64             `json:"dlq"`
	Queue      queueDetail       `json:"queue"`
	Partitions []partitionStatus `json:"partitions"`
	Totals     queueTotals       `json:"totals"`
}

// queueDetail is the queue and its configuration in queueStatus.
type queueDetail struct {
	ID        string      `json:"id"`
	Name      string      `json:"name"`
	Namespace *string     `json:"namespace"`
	Task      *string     `json:"task"`
	Priority  int         `json:"priority"`
	CreatedAt string      `json:"createdAt"`
	Config    queueConfig `json:"config"`
}

// queueConfig is the part of a queue's options queueStatus shows.
type queueConfig struct {
	LeaseTime       int  `json:"leaseTime"`
	RetryLimit      int  `json:"retryLimit"`
	RetryDelay      int  `json:"retryDelay"`
	TTL             int  `json:"ttl"`
	MaxQueueSize    int  `json:"maxQueueSize"`
	DeadLetterQueue bool `json:"deadLetterQueue"`
}

// queueTotals are the queue's counts, flat and again under messages.
type queueTotals struct {
	stateCounts
	Messages stateCounts `json:"messages"`
}

// partitionStatus is one partition in queueStatus.
type partitionStatus struct {
	ID            string       `json:"id"`
	Name          string       `json:"name"`
	CreatedAt     string       `json:"createdAt"`
	Messages      stateCounts  `json:"messages"`
	Stats         stateCounts  `json:"stats"` // Messages again
	Pending       int64        `json:"pending"`
	Total         int64        `json:"total"`
	LastActivity  *string      `json:"lastActivity"`  // the newest message; null: none
	NewestMessage *string      `json:"newestMessage"` // LastActivity again
	OldestMessage *string      `json:"oldestMessage"`
	Cursor        cursorCounts `json:"cursor"`
	// The flat figures are what queenctl's partition list reads.
	Processing int64 `json:"processing"`
	Completed  int64 `json:"completed"`
	Failed     int   `json:"failed"` // always 0
	DLQ        int64 `json:"dlq"`
}

// cursorCounts are what the cursor furthest along consumed.
type cursorCounts struct {
	TotalConsumed   int64 `json:"totalConsumed"`
	BatchesConsumed int64 `json:"batchesConsumed"`
}

// analyticsAnswer is GET /api/v1/status/analytics.
type analyticsAnswer struct {
	DataPoints []analyticsPoint `json:"dataPoints"` // oldest first
	Interval   string           `json:"interval"`   // minute, hour or day
	From       string           `json:"from"`
	To         string           `json:"to"`
	Truncated  bool             `json:"truncated"`
	PointLimit int              `json:"pointLimit"`
	// NextFrom is where the next page starts; present only when Truncated.
	NextFrom string `json:"nextFrom,omitempty"`
}

// analyticsPoint is the messages stored in one interval.
type analyticsPoint struct {
	Timestamp string `json:"timestamp"`
	Messages  int64  `json:"messages"`
}

// resourceGroup is what namespaceGroup and taskGroup share: the queues of
// one namespace or task, summed.
type resourceGroup struct {
	Name       string              `json:"name"`
	Queues     int64               `json:"queues"`
	QueueCount int64               `json:"queueCount"` // Queues again
	Partitions int64               `json:"partitions"`
	Messages   resourceGroupCounts `json:"messages"`
}

// resourceGroupCounts are a resourceGroup's message counts.
type resourceGroupCounts struct {
	Total   int64 `json:"total"`
	Pending int64 `json:"pending"`
}

// namespaceGroup is one row of /resources/namespaces.
type namespaceGroup struct {
	Namespace string `json:"namespace"`
	resourceGroup
	TaskCount int `json:"taskCount"` // distinct tasks among its queues
}

// taskGroup is one row of /resources/tasks.
type taskGroup struct {
	Task string `json:"task"`
	resourceGroup
	NamespaceCount int `json:"namespaceCount"` // distinct namespaces among its queues
}

// namespacesAnswer is GET /api/v1/resources/namespaces.
type namespacesAnswer struct {
	Namespaces []namespaceGroup `json:"namespaces"`
}

// tasksAnswer is GET /api/v1/resources/tasks.
type tasksAnswer struct {
	Tasks []taskGroup `json:"tasks"`
}
