package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store"
)

func kvBad(reason, format string, a ...any) *codedError {
	return &codedError{http.StatusBadRequest, "kv_bad_request", reason, fmt.Sprintf(format, a...)}
}

// kvRowWire is one row of getMany and getPrefix; a keys-only read leaves
// the value out. expiresAt is null for a row kept forever.
type kvRowWire struct {
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value,omitempty"`
	Version   int64           `json:"version"`
	ExpiresAt any             `json:"expiresAt"`
	UpdatedAt string          `json:"updatedAt"`
}

// kvResultWire is one KV op's answer; fields that do not apply are left out.
type kvResultWire struct {
	Op        string          `json:"op"`
	Key       string          `json:"key,omitempty"`
	Found     *bool           `json:"found,omitempty"`
	Value     json.RawMessage `json:"value,omitempty"`
	Version   *int64          `json:"version,omitempty"`
	ExpiresAt any             `json:"expiresAt,omitempty"`
	UpdatedAt string          `json:"updatedAt,omitempty"`
	Applied   *bool           `json:"applied,omitempty"`
	// Rows (getMany, getPrefix) and Missing (getMany) are pointers so that
	// an empty list is sent as [] (SPEC: always there) while the ops
	// without them leave them out: omitempty drops an empty slice.
	Rows      *[]kvRowWire `json:"rows,omitempty"`
	Missing   *[]string    `json:"missing,omitempty"`
	Truncated *bool        `json:"truncated,omitempty"`
	NextAfter string       `json:"nextAfter,omitempty"`
	Reason    string       `json:"reason,omitempty"`
}

func kvResult(r store.KVResult) kvResultWire {
	w := kvResultWire{Op: r.Op, Key: r.Key, Reason: r.Reason}
	switch r.Op {
	case "getMany", "getPrefix":
		rows := make([]kvRowWire, len(r.Rows))
		for i, row := range r.Rows {
			rows[i] = kvRowWire{Key: row.Key, Value: row.Value, Version: row.Version,
				ExpiresAt: timestampPtr(row.ExpiresAt), UpdatedAt: timestamp(row.UpdatedAt)}
		}
		w.Rows, w.Truncated, w.NextAfter = &rows, &r.Truncated, r.NextAfter
		if r.Op == "getMany" {
			missing := append([]string{}, r.Missing...)
			w.Missing = &missing
		}
		return w
	case "get":
	default:
		w.Applied = &r.Applied
	}
	w.Found = &r.Found
	if !r.Found {
		w.Value = json.RawMessage("null")
		return w
	}
	w.Value, w.Version = r.Value, &r.Version
	if !r.UpdatedAt.IsZero() {
		w.UpdatedAt, w.ExpiresAt = timestamp(r.UpdatedAt), timestampPtr(r.ExpiresAt)
		if r.ExpiresAt == nil {
			w.ExpiresAt = json.RawMessage("null")
		}
	}
	return w
}

// parseKVOps reads a KV body: an array of ops or {"operations": [...]}.
func (s *Server) parseKVOps(raw json.RawMessage) ([]store.KVOp, error) {
	list, ok := opsList(raw)
	if !ok {
		return nil, kvBad("kv_bad_body", `body must be an array of operations, or {"operations":[...]}`)
	}
	if len(list) > s.cfg.KVMaxOpsPerCall {
		return nil, kvBad("kv_too_many_ops", "%d ops in one call, the ceiling is %d (QUEEN_KV_MAX_OPS_PER_CALL)", len(list), s.cfg.KVMaxOpsPerCall)
	}
	ops := make([]store.KVOp, len(list))
	keys := 0
	for i, r := range list {
		op, err := s.parseKVOp(r, fmt.Sprintf("operations[%d]", i))
		if err != nil {
			return nil, err
		}
		keys += max(len(op.Keys), 1)
		ops[i] = op
	}
	if keys > s.cfg.KVMaxKeysPerCall {
		return nil, kvBad("kv_too_many_keys", "%d keys in one call, the ceiling is %d (QUEEN_KV_MAX_KEYS_PER_CALL)", keys, s.cfg.KVMaxKeysPerCall)
	}
	return ops, nil
}

var kvOps = map[string]bool{"get": true, "getMany": true, "getPrefix": true, "put": true, "putIfAbsent": true, "incr": true, "delete": true}

func (s *Server) parseKVOp(raw json.RawMessage, path string) (store.KVOp, error) {
	var op store.KVOp
	o, ok, err := asObject(raw, path)
	if err != nil || !ok {
		return op, kvBad("kv_bad_op", "%s must be an object", path)
	}
	if op.Op, _, err = o.str("op", path+"."); err != nil || !kvOps[op.Op] {
		return op, kvBad("kv_bad_op", "%s.op must be one of get, getMany, getPrefix, put, putIfAbsent, incr, delete", path)
	}
	if op.NS, _, err = o.str("ns", path+"."); err != nil || op.NS == "" {
		return op, kvBad("kv_ns_required", "%s.ns (a non-empty string) is required", path)
	}
	if err := limits.KVNamespace.Check(path+".", op.NS); err != nil {
		return op, kvBad("kv_bad_ns", "%s", err)
	}
	if op.Required, _, err = o.boolean("required", path+"."); err != nil {
		return op, kvBad("kv_bad_op", "%s", err.Error())
	}
	if op.KeysOnly, _, err = o.boolean("keysOnly", path+"."); err != nil {
		return op, kvBad("kv_bad_op", "%s", err.Error())
	}
	switch op.Op {
	case "getMany":
		return op, s.kvKeys(o, path, &op)
	case "getPrefix":
		if op.Prefix, _, err = o.limited("prefix", limits.KVKey, path+"."); err != nil {
			return op, kvBad("kv_bad_prefix", "%s", err.Error())
		}
		if op.After, _, err = o.limited("after", limits.KVKey, path+"."); err != nil {
			return op, kvBad("kv_bad_after", "%s", err.Error())
		}
		op.Limit = 100
		if n, ok, err := o.integer("limit", path+"."); err != nil {
			return op, kvBad("kv_bad_limit", "%s", err.Error())
		} else if ok {
			op.Limit = min(max(n, 1), s.cfg.KVPrefixLimit)
		}
		return op, nil
	}
	if op.Key, _, err = o.str("key", path+"."); err != nil || op.Key == "" {
		return op, kvBad("kv_key_required", "%s.key (a non-empty string) is required", path)
	}
	if err := limits.KVKey.Within(s.cfg.KVMaxKeyBytes, path+".", op.Key); err != nil {
		return op, kvBad("kv_key_too_long", "%s (QUEEN_KV_MAX_KEY_BYTES)", err)
	}
	if err := s.kvWriteFields(o, path, &op); err != nil {
		return op, err
	}
	return op, nil
}

func (s *Server) kvKeys(o obj, path string, op *store.KVOp) error {
	raw, ok := o["keys"]
	if !ok || json.Unmarshal(raw, &op.Keys) != nil || len(op.Keys) == 0 {
		return kvBad("kv_keys_required", "%s.keys (a non-empty array of strings) is required", path)
	}
	for i, k := range op.Keys {
		if k == "" {
			return kvBad("kv_bad_key", "%s.keys[%d] must be a non-empty string", path, i)
		}
		if err := limits.KVKey.Within(s.cfg.KVMaxKeyBytes, "", k); err != nil {
			return kvBad("kv_bad_key", "%s.keys[%d]: %s (QUEEN_KV_MAX_KEY_BYTES)", path, i, err)
		}
	}
	return nil
}

// kvWriteFields reads value, ttlSeconds / forever, expect, and an incr's
// delta (by is an older name for it), min and max.
func (s *Server) kvWriteFields(o obj, path string, op *store.KVOp) error {
	if op.Op == "put" || op.Op == "putIfAbsent" {
		v, ok := o["value"]
		if !ok {
			return kvBad("kv_value_required", "%s.value is required", path)
		}
		if len(v) > s.cfg.KVMaxValueBytes {
			return &codedError{http.StatusRequestEntityTooLarge, "payload_too_large", "kv_value_too_large",
				fmt.Sprintf("%s.value is %d bytes, the ceiling is %d (QUEEN_KV_MAX_VALUE_BYTES)", path, len(v), s.cfg.KVMaxValueBytes)}
		}
		if err := limits.JSON(path+".value", v); err != nil {
			return kvBad("kv_bad_value", "%s", err)
		}
		op.Value = v
	}
	ttl, hasTTL := o["ttlSeconds"]
	forever, _, err := o.boolean("forever", path+".")
	if err != nil {
		return kvBad("kv_bad_ttl", "%s", err.Error())
	}
	if hasTTL && !isNull(ttl) {
		if json.Unmarshal(ttl, &op.TTLSeconds) != nil || op.TTLSeconds <= 0 {
			return kvBad("kv_bad_ttl", "%s.ttlSeconds must be a positive number", path)
		}
		if err := limits.TTLSeconds.Check(path+".", op.TTLSeconds); err != nil {
			return kvBad("kv_bad_ttl", "%s", err)
		}
	}
	if (op.Op == "put" || op.Op == "putIfAbsent") && (op.TTLSeconds > 0) == forever {
		return kvBad("kv_ttl_required", "%s: exactly one of ttlSeconds and forever:true is required", path)
	}
	if e, ok := o["expect"]; ok && !isNull(e) {
		var v int64
		if json.Unmarshal(e, &v) != nil || v < 0 {
			return kvBad("kv_bad_expect", "%s.expect must be a version (an integer, 0 for absent)", path)
		}
		op.Expect = &v
	}
	if op.Op == "incr" {
		if op.Expect != nil { // incr is the way out of compare-and-swap
			return kvBad("kv_bad_expect", "%s.expect is not taken by incr (bound it with min and max)", path)
		}
		return kvIncrFields(o, path, op)
	}
	return nil
}

func kvIncrFields(o obj, path string, op *store.KVOp) error {
	op.Delta = 1
	for _, name := range []string{"by", "delta"} {
		if b, ok := o[name]; ok && !isNull(b) {
			if json.Unmarshal(b, &op.Delta) != nil {
				return kvBad("kv_bad_delta", "%s.%s must be a number", path, name)
			}
		}
	}
	for _, f := range []struct {
		name string
		dst  **float64
	}{{"min", &op.Min}, {"max", &op.Max}} {
		if b, ok := o[f.name]; ok && !isNull(b) {
			var v float64
			if json.Unmarshal(b, &v) != nil {
				return kvBad("kv_bad_bound", "%s.%s must be a number", path, f.name)
			}
			*f.dst = &v
		}
	}
	if op.Min != nil && op.Max != nil && *op.Min > *op.Max {
		return kvBad("kv_bad_bound", "%s.min must not be above %s.max", path, path)
	}
	return nil
}

// applyKV runs ops and answers the errors that belong to the call.
func (s *Server) applyKV(w http.ResponseWriter, r *http.Request, ops []store.KVOp) ([]store.KVResult, bool) {
	release, err := s.admit(r, admission.Push)
	if err != nil {
		s.kvStoreError(w, r, err)
		return nil, false
	}
	defer release()
	res, err := s.store.ApplyKV(r.Context(), tenantOf(r), ops, s.cfg.KVMaxReadBytes)
	var pre *store.KVPrecondition
	switch {
	case errors.As(err, &pre):
		writeJSON(w, http.StatusOK, kvRefused{Reason: "kv_precondition", kvPreconditionFailed: newKVPreconditionFailed(pre)})
		return nil, false
	case errors.Is(err, store.ErrKVReadTooLarge):
		writeCoded(w, http.StatusRequestEntityTooLarge, "payload_too_large", "kv_read_too_large",
			fmt.Sprintf("the call reads more than %d bytes (QUEEN_KV_MAX_READ_BYTES); nothing was written", s.cfg.KVMaxReadBytes))
		return nil, false
	case err != nil:
		s.kvStoreError(w, r, err)
		return nil, false
	}
	return res, true
}

func (s *Server) kvStoreError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	s.stats.dbErrors.Add(1)
	if store.Unavailable(err) {
		writeCoded(w, http.StatusServiceUnavailable, "kv_unavailable", "database unavailable", err.Error())
		return
	}
	s.log.Error("kv: store failure", "err", err)
	writeCoded(w, http.StatusInternalServerError, "kv_error", "store failure", err.Error())
}

// kv is POST /api/v1/kv.
func (s *Server) kv(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, false)
	if err != nil {
		writeBad(w, err)
		return
	}
	ops, err := s.parseKVOps(body)
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
	res, ok := s.applyKV(w, r, ops)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, kvAnswer{Results: kvResults(res)})
}

// kvPath is the op named by a single-key route; a query string is refused.
func (s *Server) kvPath(w http.ResponseWriter, r *http.Request, op string) (store.KVOp, bool) {
	if r.URL.RawQuery != "" {
		writeCoded(w, http.StatusBadRequest, "kv_bad_request", "kv_query_string", "single-key routes take no query string")
		return store.KVOp{}, false
	}
	k := store.KVOp{Op: op, NS: r.PathValue("ns"), Key: r.PathValue("key")}
	if k.Key == "" || limits.KVKey.Within(s.cfg.KVMaxKeyBytes, "", k.Key) != nil {
		writeCoded(w, http.StatusBadRequest, "kv_bad_request", "kv_key_required",
			fmt.Sprintf("the path must name a key of at most %d bytes (QUEEN_KV_MAX_KEY_BYTES)", s.cfg.KVMaxKeyBytes))
		return k, false
	}
	if err := limits.KVNamespace.Check("", k.NS); err != nil {
		writeCoded(w, http.StatusBadRequest, "kv_bad_request", "kv_bad_ns", err.Error())
		return k, false
	}
	return k, true
}

// kvOne runs one op and answers its bare result, with the ETag of the row.
func (s *Server) kvOne(w http.ResponseWriter, r *http.Request, op store.KVOp) {
	res, ok := s.applyKV(w, r, []store.KVOp{op})
	if !ok {
		return
	}
	if res[0].Found {
		w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(res[0].Version, 10)))
	}
	writeJSON(w, http.StatusOK, kvResult(res[0]))
}

// kvGet is GET /api/v1/kv/{ns}/{key...}.
func (s *Server) kvGet(w http.ResponseWriter, r *http.Request) {
	if op, ok := s.kvPath(w, r, "get"); ok {
		s.kvOne(w, r, op)
	}
}

// kvPut is PUT /api/v1/kv/{ns}/{key...} with {value, ttlSeconds | forever,
// expect?, required?}; If-Match: "<version>" is an expect too.
func (s *Server) kvPut(w http.ResponseWriter, r *http.Request) {
	op, ok := s.kvPathWrite(w, r, "put", false)
	if !ok {
		return
	}
	if m := strings.Trim(r.Header.Get("If-Match"), `"`); m != "" && op.Expect == nil {
		v, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			writeCoded(w, http.StatusBadRequest, "kv_bad_request", "kv_bad_expect", "If-Match must be a version")
			return
		}
		op.Expect = &v
	}
	s.kvOne(w, r, op)
}

// kvDelete is DELETE /api/v1/kv/{ns}/{key...}, with an optional body
// {expect?, required?}.
func (s *Server) kvDelete(w http.ResponseWriter, r *http.Request) {
	if op, ok := s.kvPathWrite(w, r, "delete", true); ok {
		s.kvOne(w, r, op)
	}
}

// kvPathWrite reads a single-key write: the op the path names and the
// body's write fields and required flag (an empty body only when
// allowEmpty).
func (s *Server) kvPathWrite(w http.ResponseWriter, r *http.Request, name string, allowEmpty bool) (store.KVOp, bool) {
	op, ok := s.kvPath(w, r, name)
	if !ok {
		return op, false
	}
	o, err := readObject(r, allowEmpty)
	if err != nil {
		writeBad(w, err)
		return op, false
	}
	if err := s.kvWriteFields(o, "body", &op); err != nil {
		writeCodedErr(w, err)
		return op, false
	}
	if op.Required, _, err = o.boolean("required", "body."); err != nil {
		writeCodedErr(w, kvBad("kv_bad_op", "%s", err.Error()))
		return op, false
	}
	return op, true
}
