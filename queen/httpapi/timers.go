package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store"
)

// Timer errors answer {"error": code, "reason", "detail"}: clients branch on
// error only.
func writeCoded(w http.ResponseWriter, status int, code, reason, detail string) {
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, codedAnswer{Error: code, Reason: reason, Detail: detail})
}

// codedError is a refused call with its wire code.
type codedError struct {
	status               int
	code, reason, detail string
}

func (e *codedError) Error() string { return e.detail }

func timersBad(reason, format string, a ...any) *codedError {
	return &codedError{http.StatusBadRequest, "timers_bad_request", reason, fmt.Sprintf(format, a...)}
}

// timerResultWire is one timer op's answer.
type timerResultWire struct {
	OK        bool    `json:"ok"`
	Status    string  `json:"status"`
	Queue     string  `json:"queue"`
	TimerKey  string  `json:"timerKey"`
	Txn       string  `json:"txn,omitempty"`
	MessageID string  `json:"messageId,omitempty"`
	DeliverAt *string `json:"deliverAt,omitempty"`
}

func timerResults(rs []store.TimerResult) []timerResultWire {
	out := make([]timerResultWire, len(rs))
	for i, r := range rs {
		out[i] = timerResultWire{OK: r.OK, Status: r.Status, Queue: r.Queue, TimerKey: r.TimerKey, Txn: r.Txn, MessageID: r.MessageID}
		if r.DeliverAt != nil {
			out[i].DeliverAt = strPtr(timestamp(*r.DeliverAt))
		}
	}
	return out
}

// serverOwnedTimerFields are set by the broker; a client sending one is
// refused rather than silently overruled.
var serverOwnedTimerFields = map[string]bool{"producerSub": true, "messageId": true, "claimToken": true, "attempts": true,
	"delaySeconds": true, "deliver_at": true}

// parseTimerOps reads a timers body: an array of ops or {"operations": [...]}.
func (s *Server) parseTimerOps(raw json.RawMessage) ([]store.TimerOp, error) {
	list, ok := opsList(raw)
	if !ok {
		return nil, timersBad("timers_bad_body", `body must be an array of operations, or {"operations":[...]}`)
	}
	if len(list) > s.cfg.TimersMaxOpsPerCall {
		return nil, timersBad("timers_too_many_ops", "%d ops in one call, the ceiling is %d (QUEEN_TIMERS_MAX_OPS_PER_CALL)",
			len(list), s.cfg.TimersMaxOpsPerCall)
	}
	ops := make([]store.TimerOp, len(list))
	seen := map[[2]string]bool{}
	for i, r := range list {
		op, err := s.parseTimerOp(r, fmt.Sprintf("operations[%d]", i))
		if err != nil {
			return nil, err
		}
		k := [2]string{op.Queue, op.TimerKey}
		if seen[k] {
			return nil, timersBad("timers_duplicate_key", "operations[%d]: %s/%s is named twice in one call", i, op.Queue, op.TimerKey)
		}
		seen[k] = true
		ops[i] = op
	}
	return ops, nil
}

func (s *Server) parseTimerOp(raw json.RawMessage, path string) (store.TimerOp, error) {
	var op store.TimerOp
	o, ok, err := asObject(raw, path)
	if err != nil || !ok {
		return op, timersBad("timers_bad_op", "%s must be an object", path)
	}
	for k := range o {
		if strings.HasPrefix(k, "_") || strings.HasPrefix(k, "tenant") || serverOwnedTimerFields[k] {
			return op, timersBad("timers_server_owned_field", "%s.%s is set by the broker and cannot be supplied", path, k)
		}
	}
	str := func(name string, required bool) (string, error) {
		v, ok, err := o.str(name, path+".")
		if err != nil || (required && (!ok || v == "")) {
			return "", timersBad("timers_"+strings.ToLower(name)+"_required", "%s.%s (a non-empty string) is required", path, name)
		}
		return v, nil
	}
	if op.Op, err = str("op", true); err != nil {
		return op, err
	}
	if op.Op != "schedule" && op.Op != "reschedule" && op.Op != "cancel" {
		return op, timersBad("timers_bad_op", "%s.op must be schedule, reschedule or cancel", path)
	}
	if op.Queue, err = str("queue", true); err != nil {
		return op, err
	}
	if op.TimerKey, err = str("timerKey", true); err != nil {
		return op, err
	}
	if op.Partition, err = str("partition", false); err != nil {
		return op, err
	}
	if op.Op == "cancel" {
		op.Txn, err = str("txn", false)
		return op, err
	}
	if op.Txn, err = str("txn", op.Op == "schedule"); err != nil {
		return op, err
	}
	// The fire pushes the timer as a message: its names are held to the
	// push route's limits here, where a 400 is still possible, not at the
	// fire, where a refused row could only fail.
	if err := limits.CheckAll(path+".", limits.Value{Field: limits.Queue, V: op.Queue}, limits.Value{Field: limits.TimerKey, V: op.TimerKey},
		limits.Value{Field: limits.Partition, V: op.Partition}, limits.Value{Field: limits.TransactionID, V: op.Txn}); err != nil {
		return op, timersBad("timers_bad_field", "%s", err)
	}
	if err := s.parseWhen(o, path, &op); err != nil {
		return op, err
	}
	if p, ok := o["payload"]; ok && !isNull(p) {
		if op.Payload, err = s.timerPayload(p, path); err != nil {
			return op, err
		}
	} else if op.Op == "schedule" {
		op.Payload = json.RawMessage("null")
	}
	return op, nil
}

// parseWhen reads delayMs (after the database's now) or deliverAt (an RFC
// 3339 instant): exactly one, within the horizon.
func (s *Server) parseWhen(o obj, path string, op *store.TimerOp) error {
	d, hasDelay := o["delayMs"]
	at, hasAt := o["deliverAt"]
	if hasDelay == hasAt {
		return timersBad("timers_delay_required", "%s: exactly one of delayMs (milliseconds from now) and deliverAt (RFC 3339) is required", path)
	}
	horizon := s.cfg.TimersMaxHorizon
	if hasDelay {
		if err := json.Unmarshal(d, &op.DelayMs); err != nil {
			return timersBad("timers_delay_required", "%s.delayMs must be a number of milliseconds", path)
		}
		if err := limits.DelayMs.Check(path+".", op.DelayMs); err != nil {
			return timersBad("timers_delay_required", "%s", err)
		}
		if time.Duration(op.DelayMs*float64(time.Millisecond)) > horizon {
			return &codedError{http.StatusForbidden, "timer_horizon_exceeded", "timers_horizon",
				fmt.Sprintf("%s.delayMs %.0f is beyond the %d ms horizon (QUEEN_TIMERS_MAX_HORIZON_S)", path, op.DelayMs, horizon.Milliseconds())}
		}
		return nil
	}
	var v string
	if err := json.Unmarshal(at, &v); err != nil {
		return timersBad("timers_bad_deliver_at", "%s.deliverAt must be an RFC 3339 instant", path)
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return timersBad("timers_bad_deliver_at", "%s.deliverAt must be an RFC 3339 instant: %v", path, err)
	}
	if t.Sub(s.clock.Now()) > horizon {
		return &codedError{http.StatusForbidden, "timer_horizon_exceeded", "timers_horizon",
			fmt.Sprintf("%s.deliverAt is beyond the %s horizon (QUEEN_TIMERS_MAX_HORIZON_S)", path, horizon)}
	}
	op.DeliverAt = &t
	return nil
}

// timerPayload is the fired message's payload. Queen's clients send it as
// base64 of the message's JSON; a string that is base64 of valid JSON is
// decoded, and anything else is taken as the JSON value itself.
func (s *Server) timerPayload(raw json.RawMessage, path string) (json.RawMessage, error) {
	var b64 string
	if json.Unmarshal(raw, &b64) == nil {
		if dec, err := base64.StdEncoding.DecodeString(b64); err == nil && json.Valid(dec) {
			raw = dec
		}
	}
	if len(raw) > s.cfg.TimersMaxPayloadBytes {
		return nil, &codedError{http.StatusRequestEntityTooLarge, "payload_too_large", "timers_payload_too_large",
			fmt.Sprintf("%s.payload is %d bytes, the ceiling is %d (QUEEN_TIMERS_MAX_PAYLOAD_BYTES)", path, len(raw), s.cfg.TimersMaxPayloadBytes)}
	}
	if err := limits.JSON(path+".payload", raw); err != nil {
		return nil, timersBad("timers_bad_payload", "%s", err)
	}
	return raw, nil
}

func writeCodedErr(w http.ResponseWriter, err error) {
	if c, ok := err.(*codedError); ok {
		writeCoded(w, c.status, c.code, c.reason, c.detail)
		return
	}
	writeBad(w, err)
}

// timersStoreError answers a failed timer call: 503 timers_unavailable
// (Retry-After: 1) when the database is unreachable, else 500.
func (s *Server) timersStoreError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	s.stats.dbErrors.Add(1)
	if store.Unavailable(err) {
		writeCoded(w, http.StatusServiceUnavailable, "timers_unavailable", "database unavailable", err.Error())
		return
	}
	s.log.Error("timers: store failure", "err", err)
	writeCoded(w, http.StatusInternalServerError, "timers_error", "store failure", err.Error())
}

// applyTimers runs parsed ops and hints the local sweeper of the nearest
// due time it committed.
func (s *Server) applyTimers(w http.ResponseWriter, r *http.Request, ops []store.TimerOp) ([]store.TimerResult, bool) {
	release, err := s.admit(r, admission.Push)
	if err != nil {
		s.timersStoreError(w, r, err)
		return nil, false
	}
	defer release()
	var res []store.TimerResult
	err = s.store.InTx(r.Context(), func(ctx context.Context, tx pgx.Tx) (err error) {
		res, err = s.writes.ApplyTimers(ctx, tx, tenantOf(r), subOf(r), ops)
		return err
	})
	if err != nil {
		s.timersStoreError(w, r, err)
		return nil, false
	}
	s.hintSweeper(res)
	return res, true
}

func (s *Server) hintSweeper(res []store.TimerResult) {
	if s.timerHint == nil {
		return
	}
	now := s.clock.Now()
	for _, t := range res {
		if t.OK && t.DeliverAt != nil {
			s.timerHint(t.DeliverAt.Sub(now))
		}
	}
}

// timers is POST /api/v1/timers.
func (s *Server) timers(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, false)
	if err != nil {
		writeBad(w, err)
		return
	}
	ops, err := s.parseTimerOps(body)
	if err != nil {
		writeCodedErr(w, err)
		return
	}
	names := make([]string, len(ops))
	for i, op := range ops {
		names[i] = op.Op
	}
	if denied := s.opsAllowed(r, names); denied != nil {
		writeBad(w, denied)
		return
	}
	// schedule creates or replaces: replacing is a reschedule, which
	// needs reschedule's level.
	replace := s.opsAllowed(r, []string{"reschedule"}) == nil
	for i := range ops {
		ops[i].NoReplace = !replace
	}
	if res, ok := s.applyTimers(w, r, ops); ok {
		writeJSON(w, http.StatusOK, timerResultsAnswer{Results: timerResults(res)})
	}
}

// cancelTimer is DELETE /api/v1/timers/{queue}/{timerKey...}[?txn=].
func (s *Server) cancelTimer(w http.ResponseWriter, r *http.Request) {
	op := store.TimerOp{Op: "cancel", Queue: r.PathValue("queue"), TimerKey: r.PathValue("timerKey"), Txn: r.URL.Query().Get("txn")}
	if op.TimerKey == "" {
		writeCoded(w, http.StatusBadRequest, "timers_bad_request", "timers_timerkey_required", "the path must name a timer key")
		return
	}
	if res, ok := s.applyTimers(w, r, []store.TimerOp{op}); ok {
		writeJSON(w, http.StatusOK, timerResults(res)[0])
	}
}

// timerWire is one pending timer, listed or peeked. The payload is base64
// of the bytes as stored, as a schedule takes it in: sealed when
// encrypted says so (a peek inspects, it does not decrypt); a list leaves
// payloads out.
type timerWire struct {
	Found       *bool  `json:"found,omitempty"`
	Queue       string `json:"queue"`
	TimerKey    string `json:"timerKey"`
	Partition   string `json:"partition"`
	DeliverAt   string `json:"deliverAt"`
	Txn         string `json:"txn"`
	MessageID   string `json:"messageId"`
	Payload     string `json:"payload,omitempty"`
	PayloadZstd bool   `json:"payloadZstd"`
	Encrypted   bool   `json:"encrypted"`
	ProducerSub string `json:"producerSub,omitempty"`
	Claimed     bool   `json:"claimed"`
	Failed      bool   `json:"failed,omitempty"`
	Attempts    int    `json:"attempts"`
	LastError   string `json:"lastError,omitempty"`
	CreatedAt   string `json:"createdAt"`
	UpdatedAt   string `json:"updatedAt"`
}

func toTimerWire(t store.Timer) timerWire {
	w := timerWire{Queue: t.Queue, TimerKey: t.TimerKey, Partition: t.Partition, DeliverAt: timestamp(t.DeliverAt),
		Txn: t.Txn, MessageID: t.MessageID, Encrypted: t.Encrypted, ProducerSub: t.ProducerSub, Claimed: t.Claimed, Failed: t.Failed,
		Attempts: t.Attempts, LastError: t.LastError, CreatedAt: timestamp(t.CreatedAt), UpdatedAt: timestamp(t.UpdatedAt)}
	if t.Payload != nil {
		w.Payload = base64.StdEncoding.EncodeToString(t.Payload)
	}
	return w
}

// peekTimer is GET /api/v1/timers/{queue}/{timerKey...}; a miss is
// {"found": false}.
func (s *Server) peekTimer(w http.ResponseWriter, r *http.Request) {
	t, ok, err := s.store.PeekTimer(r.Context(), tenantOf(r), r.PathValue("queue"), r.PathValue("timerKey"))
	if err != nil {
		s.timersStoreError(w, r, err)
		return
	}
	if !ok {
		writeJSON(w, http.StatusOK, timerMiss{})
		return
	}
	tw := toTimerWire(t)
	found := true
	tw.Found = &found
	writeJSON(w, http.StatusOK, tw)
}

// listTimers is GET /api/v1/timers/{queue}?mode=list|count&after=&limit=&prefix=.
func (s *Server) listTimers(w http.ResponseWriter, r *http.Request) {
	q, queue, tenant := r.URL.Query(), r.PathValue("queue"), tenantOf(r)
	switch q.Get("mode") {
	case "", "list":
		limit := 100
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				writeCoded(w, http.StatusBadRequest, "timers_bad_request", "timers_bad_limit", "limit must be an integer")
				return
			}
			limit = min(max(n, 1), 1000)
		}
		ts, err := s.store.ListTimers(r.Context(), tenant, queue, q.Get("after"), limit+1)
		if err != nil {
			s.timersStoreError(w, r, err)
			return
		}
		truncated := len(ts) > limit
		if truncated {
			ts = ts[:limit]
		}
		out := make([]timerWire, len(ts))
		for i, t := range ts {
			out[i] = toTimerWire(t)
		}
		body := timerList{Queue: queue, Rows: out, Truncated: truncated}
		if truncated {
			body.NextAfter = &ts[len(ts)-1].TimerKey
		}
		writeJSON(w, http.StatusOK, body)
	case "count":
		prefix := q.Get("prefix")
		if prefix == "" || q.Has("after") || q.Has("limit") {
			writeCoded(w, http.StatusBadRequest, "timers_bad_request", "timers_count_prefix_required",
				"mode=count takes a non-empty prefix and no after or limit")
			return
		}
		n, err := s.store.CountTimers(r.Context(), tenant, queue, prefix)
		if err != nil {
			s.timersStoreError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, timerCount{Queue: queue, Prefix: prefix, Count: n})
	default:
		writeCoded(w, http.StatusBadRequest, "timers_bad_request", "timers_read_mode_unknown", "mode must be list or count")
	}
}

// opsList reads an ops body, as Queen's timers and KV routes take it: an
// array of ops, or {"operations": [...]}.
func opsList(raw json.RawMessage) ([]json.RawMessage, bool) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, true
	}
	var wrapped struct {
		Operations []json.RawMessage `json:"operations"`
	}
	if err := json.Unmarshal(raw, &wrapped); err != nil || wrapped.Operations == nil {
		return nil, false
	}
	return wrapped.Operations, true
}
