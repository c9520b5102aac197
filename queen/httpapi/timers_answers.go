package httpapi

// The answers of the timers routes (timers.go), and the coded refusal
// the timers, KV and ack routes share, except timerResultWire and
// timerWire, which live beside their builders in timers.go.

// timerResultsAnswer answers POST /api/v1/timers: one result per op, in
// order.
type timerResultsAnswer struct {
	Results []timerResultWire `json:"results"` // never null
}

// timerMiss is a peek at a timer that is not pending.
type timerMiss struct {
	Found bool `json:"found"` // always false
}

// timerList answers GET /api/v1/timers/{queue} in list mode: a page of
// pending timers in key order, without payloads.
type timerList struct {
	Queue     string      `json:"queue"`
	Rows      []timerWire `json:"rows"` // never null
	Truncated bool        `json:"truncated"`
	// NextAfter is the after of the next page, there only when truncated.
	NextAfter *string `json:"nextAfter,omitempty"`
}

// timerCount answers GET /api/v1/timers/{queue}?mode=count: the pending
// timers whose key starts with prefix.
type timerCount struct {
	Queue  string `json:"queue"`
	Prefix string `json:"prefix"`
	Count  int64  `json:"count"`
}

// codedAnswer is a refused timers, KV or ack call (writeCoded).
type codedAnswer struct {
	Error  string `json:"error"`  // the code clients branch on
	Reason string `json:"reason"` // the finer cause
	Detail string `json:"detail,omitempty"`
}
