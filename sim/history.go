// Package sim is the simulator: a cluster harness that runs brokers in
// process against one real PostgreSQL, a seeded workload, a history
// recorder, and the property checkers that judge a run from its history
// and a final read of the database.
//
// Histories are JSONL, one Event per line. An operation is an "invoke"
// event followed by exactly one completion with the same Call: "ok", "fail"
// (it certainly did not happen) or "info" (indeterminate: it may or may not
// have happened, e.g. a timeout). Checkers treat info as "maybe".
package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
)

// Event kinds.
const (
	KInvoke = "invoke"
	KOK     = "ok"
	KFail   = "fail"
	KInfo   = "info"
	KFault  = "fault"
	KBroker = "broker"
	KClient = "client"
	KFinal  = "final"
	// KSweep is a sweeper's claim of a timer (What "claim") or the end
	// of one (What "fired" or "failed"), Lease holding the claim token.
	KSweep = "sweep"
	// KProbe is a wake probe (wake.probe): Until holds how long after
	// its push was answered the probe's long poll answered (ms), Code
	// the poll's status, Status the transactionId it delivered.
	KProbe = "probe"
	// KClaim is a pop's claim that began after its client had gone (What
	// "client-gone"), as the broker saw it (httpapi.PopClaim).
	KClaim = "claim"
	// KLeader is a leader pass (What "start", then "end" with Err when it
	// failed) of Role on broker B, on the lock session Session (a backend
	// pid), numbered Pass; or the termination of a session, confirmed
	// gone (What "cut"): Pass names the pass in whose start it was made,
	// before any statement of it (leader.cut), 0 when made from outside
	// (leader.kill).
	KLeader = "leader"
)

// Event is one line of a history.
type Event struct {
	Index  int    `json:"i"`
	Kind   string `json:"k"`
	Call   int    `json:"call,omitempty"`
	Op     string `json:"op,omitempty"` // push pop ack extend txn
	Client int    `json:"c,omitempty"`
	Broker int    `json:"b,omitempty"`
	VT     int64  `json:"vt"` // virtual (lockstep) or wall (free-running) milliseconds

	Tenant    string `json:"tenant,omitempty"`
	Queue     string `json:"q,omitempty"`
	Partition string `json:"p,omitempty"`
	Group     string `json:"g,omitempty"`
	Txid      string `json:"txid,omitempty"`
	Status    string `json:"status,omitempty"`
	Lease     string `json:"lease,omitempty"`
	LeaseSecs int    `json:"leaseSecs,omitempty"`
	Msgs      []Msg  `json:"msgs,omitempty"`
	Err       string `json:"err,omitempty"`
	// Code is the HTTP status of a completion; Bad says what was wrong
	// with a 2xx answer that did not have its documented shape (an empty
	// body, say): the answers checker turns it into a violation.
	Code int    `json:"code,omitempty"`
	Bad  string `json:"bad,omitempty"`
	// Foreign marks an ack or extend sent under another tenant than the
	// lease's: it must not succeed, and it counts for nothing else.
	Foreign bool `json:"foreign,omitempty"`
	// Direct marks a pop that went through its broker's consume.Consumer
	// rather than HTTP (Weights.DirectPct): recorded and judged as an HTTP
	// pop is, its answer's status the one the pop route would have given.
	Direct bool `json:"direct,omitempty"`

	// Late subscriptions (subs.go): SubMode is the subscriptionMode a
	// late group's pop sends ("new", or "from" for subscriptionFrom), and
	// SubFrom its subscriptionFrom, or a seek's target timestamp, in
	// virtual ms (lockstep: database time from the run's epoch).
	SubMode string `json:"sub,omitempty"`
	SubFrom int64  `json:"subFrom,omitempty"`

	// At is a timer's deliverAt as answered (Unix ms, database time).
	At int64 `json:"at,omitempty"`
	// MsgID is the message id a push answered (the stored one for a
	// duplicate); in process only, not part of the recorded history (ids
	// are not replayable), for the answers checker.
	MsgID string `json:"-"`

	Fault string `json:"f,omitempty"`    // fault name
	What  string `json:"what,omitempty"` // broker/client event
	Until int64  `json:"until,omitempty"`
	Rows  []Row  `json:"rows,omitempty"`
	// Timers are the timers still pending at the final read, and DBNow
	// the database's now then (Unix ms).
	Timers []PendingTimer `json:"timers,omitempty"`
	DBNow  int64          `json:"dbNow,omitempty"`
	// StreamState and StreamSink are the counting query's state rows and
	// sink messages at the final read.
	StreamState []StreamState `json:"streamState,omitempty"`
	StreamSink  []StreamOut   `json:"streamSink,omitempty"`
	// Plain are the rows the final read found stored in the clear in a
	// queue after its encryption was turned on.
	Plain []Key `json:"plain,omitempty"`
	// Twice are the rows the final read found sealed twice: the stored
	// envelope opens to another envelope (sealed rule).
	Twice []Key `json:"twice,omitempty"`
	// Overlap are the moved queue's rows the final read found on both
	// shards while the source was not a tombstone (shard-overlap rule).
	Overlap []string `json:"overlap,omitempty"`
	// Quarantined are the spooled records the drains quarantined, with
	// PostgreSQL's reason, from every broker's failed/ directory.
	Quarantined []Quarantined `json:"quarantined,omitempty"`

	// The retention probe (retention.fail, CheckRetention): Rule is the
	// retention rule (expired, completed, evicted) a probe message is
	// under, or the one the fault makes fail; Due is when (vt) a probe
	// message became due under its rule.
	Rule string `json:"rule,omitempty"`
	Due  int64  `json:"due,omitempty"`
	// Leader passes (KLeader). Session is a backend pid: left out of a
	// lockstep run's hash (pids differ between replays).
	Role    string `json:"role,omitempty"`
	Session uint32 `json:"session,omitempty"`
	Pass    int    `json:"pass,omitempty"`
}

// Quarantined is one record a spool drain gave up on.
type Quarantined struct {
	Key
	Reason string `json:"reason"`
	// B is the broker whose failed/ directory holds it.
	B int `json:"b,omitempty"`
}

// PendingTimer is a timer row found by the final read.
type PendingTimer struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
	At     int64  `json:"at"` // deliverAt, Unix ms
}

// Msg is a message in a pop result, an ack item, or an op of a transaction.
type Msg struct {
	Op        string `json:"op,omitempty"` // in transactions: push or ack
	Tenant    string `json:"tenant,omitempty"`
	Queue     string `json:"q,omitempty"`
	Partition string `json:"p,omitempty"`
	Txid      string `json:"txid"`
	Lease     string `json:"lease,omitempty"`
	Status    string `json:"status,omitempty"` // ack status asked; push status answered
	OK        bool   `json:"ok,omitempty"`     // ack item outcome
	Released  bool   `json:"released,omitempty"`
	DLQ       bool   `json:"dlq,omitempty"`
	Err       string `json:"err,omitempty"`
	PID       string `json:"-"` // partition id, needed to ack; not part of the history
	// Data is what a delivery carried, recorded only when it is not the
	// payload written for its transactionId (writtenPayload): the
	// payloads rule judges it.
	Data json.RawMessage `json:"data,omitempty"`
	ID   string          `json:"-"` // message id as delivered; not part of the history
}

// Row is a message row found by the final database read.
type Row struct {
	Tenant    string   `json:"tenant"`
	Queue     string   `json:"q"`
	Partition string   `json:"p"`
	Txid      string   `json:"txid"`
	Count     int      `json:"count"`             // rows with this key (dedup: must be 1)
	DoneBy    []string `json:"done_by,omitempty"` // groups whose cursor is past it
	DLQBy     []string `json:"dlq_by,omitempty"`  // groups that dead-lettered it
	At        int64    `json:"at,omitempty"`      // fired timers: created_at, Unix ms
}

// finalEvent is the history's final read, or nil when the run has none.
func finalEvent(h []Event) *Event {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Kind == KFinal {
			return &h[i]
		}
	}
	return nil
}

// Key identifies a logical message.
type Key struct{ Tenant, Q, P, Txid string }

func (m Msg) Key() Key   { return Key{m.Tenant, m.Queue, m.Partition, m.Txid} }
func (e Event) Key() Key { return Key{e.Tenant, e.Queue, e.Partition, e.Txid} }

func (k Key) String() string { return fmt.Sprintf("%s/%s/%s/%s", k.Tenant, k.Q, k.P, k.Txid) }

// History records events in order. It is safe for concurrent use.
type History struct {
	mu     sync.Mutex
	events []Event
	calls  int
}

// Add appends e, numbering it.
func (h *History) Add(e Event) Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	e.Index = len(h.events)
	h.events = append(h.events, e)
	return e
}

// Invoke records the start of an operation and returns its call id.
func (h *History) Invoke(e Event) int {
	h.mu.Lock()
	h.calls++
	e.Call = h.calls
	h.mu.Unlock()
	e.Kind = KInvoke
	h.Add(e)
	return e.Call
}

// Events returns a copy of the events so far.
func (h *History) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events...)
}

// WriteJSONL writes the history, one event per line.
func (h *History) WriteJSONL(w io.Writer) error {
	enc := json.NewEncoder(w)
	for _, e := range h.Events() {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// ReadHistory parses a JSONL history file.
func ReadHistory(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 || sc.Bytes()[0] == '#' {
			continue
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		e.Index = len(out)
		out = append(out, e)
	}
	return out, sc.Err()
}
