package httpapi

// Answers of GET /health and GET /metrics.

// healthStatus is GET /health: 200 healthy, 503 with Error when the
// database does not answer.
type healthStatus struct {
	Server   string  `json:"server"` // always "queen-go"
	Version  string  `json:"version"`
	ServerID string  `json:"serverId"`
	Status   string  `json:"status"`   // "healthy" or "unhealthy"
	Database string  `json:"database"` // "connected", "disconnected" or "read-only"
	Error    *string `json:"error,omitempty"`
}

// brokerMetrics is GET /metrics: Queen's keys (a Node.js process's)
// where Go has the figure, 0 where it has none, Go's own beside them.
type brokerMetrics struct {
	Uptime       float64         `json:"uptime"` // seconds
	Requests     requestCounts   `json:"requests"`
	Messages     messageCounts   `json:"messages"`
	Transactions int64           `json:"transactions"`
	Database     databaseMetrics `json:"database"`
	Memory       memoryMetrics   `json:"memory"`
	CPU          cpuMetrics      `json:"cpu"`
	ServerID     string          `json:"serverId"`
	ObservedAt   string          `json:"observedAt"`
}

// requestCounts are the HTTP requests since start; Rate is per second of
// uptime.
type requestCounts struct {
	Total int64   `json:"total"`
	Rate  float64 `json:"rate"`
}

// messageCounts are the messages since start; Total and Rate count the
// pushed ones.
type messageCounts struct {
	Total  int64   `json:"total"`
	Rate   float64 `json:"rate"`
	Pushed int64   `json:"pushed"`
	Popped int64   `json:"popped"`
	Acked  int64   `json:"acked"`
	DLQ    int64   `json:"dlq"`
}

// databaseMetrics is the connection pool.
type databaseMetrics struct {
	PoolSize          int32 `json:"poolSize"`
	IdleConnections   int32 `json:"idleConnections"`
	WaitingRequests   int   `json:"waitingRequests"` // for an admission slot
	ActiveConnections int32 `json:"activeConnections"`
	AcquireWaitsTotal int64 `json:"acquireWaitsTotal"` // acquisitions that waited for a connection
	Errors            int64 `json:"errors"`
}

// memoryMetrics is the process's memory in bytes.
type memoryMetrics struct {
	RSS          int64  `json:"rss"`
	HeapTotal    uint64 `json:"heapTotal"`
	HeapUsed     uint64 `json:"heapUsed"`
	External     int    `json:"external"`     // always 0: a Node.js figure
	ArrayBuffers int    `json:"arrayBuffers"` // always 0: a Node.js figure
	Sys          uint64 `json:"sys"`
	NumGC        uint32 `json:"numGC"`
}

// cpuMetrics is the process's CPU time in microseconds, and its
// goroutines and CPUs.
type cpuMetrics struct {
	User       int64 `json:"user"`
	System     int64 `json:"system"`
	Goroutines int   `json:"goroutines"`
	CPUs       int   `json:"cpus"`
}
