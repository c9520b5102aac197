package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/txn"
)

// parseAck reads one acknowledgement object key by key, keys matched
// exactly, and checks it: the single ack, the transaction route's ack
// operations and the items of an ack batch the typed decode refuses.
func parseAck(o obj, path string) (store.AckItem, error) {
	w := ackItemWire{keyByKey: true}
	w.notString[0] = !o.wire("transactionId", &w.TransactionID)
	w.notString[1] = !o.wire("partitionId", &w.PartitionID)
	// JS clients may send a boolean status: true is completed, false failed.
	var done bool
	if raw, ok := o["status"]; ok && !isNull(raw) && json.Unmarshal(raw, &done) == nil {
		w.Status = map[bool]wireString{true: "completed", false: "failed"}[done]
	} else {
		w.notString[2] = !o.wire("status", &w.Status)
	}
	w.notString[3] = !o.wire("leaseId", &w.LeaseID)
	w.notString[4] = !o.wire("error", &w.Error)
	return w.item(path)
}

// item checks one decoded acknowledgement and names the first field that
// is wrong: the one place the ack rules live. A transactionId or
// partitionId of another type is as good as absent. The transactionId's
// limits come right after its presence when the item was read key by key,
// and last when it came from the typed batch decode, as each reading always
// answered; the two orders differ only in which of two refusals is named.
func (w *ackItemWire) item(path string) (store.AckItem, error) {
	a := store.AckItem{TransactionID: string(w.TransactionID), PartitionID: string(w.PartitionID),
		Status: string(w.Status), LeaseID: string(w.LeaseID), Error: string(w.Error)}
	if a.TransactionID == "" {
		return a, bad("%stransactionId is required", path)
	}
	if w.keyByKey {
		if err := limits.TransactionID.Check(path, a.TransactionID); err != nil {
			return a, err
		}
	}
	if a.PartitionID == "" {
		return a, bad("%spartitionId is required to ensure message uniqueness", path)
	}
	for i, f := range [...]struct {
		v     string
		limit limits.Field
	}{{a.Status, limits.Status}, {a.LeaseID, limits.LeaseID}, {a.Error, limits.ErrorText}} {
		if err := notAString(w.notString[2+i], path, f.limit.Name); err != nil {
			return a, err
		}
		if err := f.limit.Check(path, f.v); err != nil {
			return a, err
		}
	}
	if !w.keyByKey {
		return a, limits.TransactionID.Check(path, a.TransactionID)
	}
	return a, nil
}

func (s *Server) ack(w http.ResponseWriter, r *http.Request) {
	s.stats.ackRequests.Add(1)
	body, err := readObject(r, false)
	if err != nil {
		writeBad(w, err)
		return
	}
	item, err := parseAck(body, "")
	if err != nil {
		writeBad(w, err)
		return
	}
	group, _, err := body.limited("consumerGroup", limits.ConsumerGroup, "")
	if err != nil {
		writeBad(w, err)
		return
	}
	s.applyAcks(w, r, group, []store.AckItem{item})
}

// parseAckBatch decodes and checks an ack batch: in one pass when its
// values fit the typed structs, else key by key (parseAckBatchFields), so
// that the answer names the field whose value does not fit.
func parseAckBatch(body []byte) (group string, items []store.AckItem, err error) {
	var b ackBatchBody
	if json.Unmarshal(body, &b) != nil || b.Acknowledgments == nil {
		return parseAckBatchFields(body)
	}
	if err := limits.ConsumerGroup.Check("", string(b.ConsumerGroup)); err != nil {
		return "", nil, err
	}
	items = make([]store.AckItem, len(*b.Acknowledgments))
	for i := range *b.Acknowledgments {
		if items[i], err = (*b.Acknowledgments)[i].item(fmt.Sprintf("acknowledgments[%d].", i)); err != nil {
			return "", nil, err
		}
	}
	return string(b.ConsumerGroup), items, nil
}

func (s *Server) ackBatch(w http.ResponseWriter, r *http.Request) {
	s.stats.ackRequests.Add(1)
	raw, err := readBody(r, false)
	if err != nil {
		writeBad(w, err)
		return
	}
	group, items, err := parseAckBatch(raw)
	if err != nil {
		writeBad(w, err)
		return
	}
	s.applyAcks(w, r, group, items)
}

// parseAckBatchFields reads an ack batch the typed decode refused, key by
// key: its keys are matched exactly (encoding/json's struct decoding also
// takes them in another case), and the first field that is wrong is named.
func parseAckBatchFields(raw []byte) (string, []store.AckItem, error) {
	body, err := decodeObject(raw)
	if err != nil {
		return "", nil, err
	}
	acks, ok, err := body.array("acknowledgments", "")
	if err != nil || !ok {
		return "", nil, bad("acknowledgments array is required")
	}
	group, _, err := body.limited("consumerGroup", limits.ConsumerGroup, "")
	if err != nil {
		return "", nil, err
	}
	items := make([]store.AckItem, len(acks))
	for i, rw := range acks {
		path := fmt.Sprintf("acknowledgments[%d].", i)
		o, _, err := asObject(rw, path[:len(path)-1])
		if err != nil {
			return "", nil, err
		}
		if items[i], err = parseAck(o, path); err != nil {
			return "", nil, err
		}
	}
	return group, items, nil
}

// applyAcks answers 200 with one result per item; per-item failures are in
// the results, as Queen's clients expect.
func (s *Server) applyAcks(w http.ResponseWriter, r *http.Request, group string, items []store.AckItem) {
	for i := range items {
		// A malformed partition id cannot name a message; answer "not
		// found" rather than failing the whole request on a cast error.
		if !ids.Valid(items[i].PartitionID) {
			items[i].PartitionID = "00000000-0000-0000-0000-000000000000"
		}
	}
	ctx, release, err := s.hold(r, admission.Ack)
	if err != nil {
		return
	}
	results, err := s.consumer.Ack(ctx, tenantOf(r), group, items)
	release()
	if err != nil {
		s.storeError(w, r, "ack", err)
		return
	}
	s.recordAcked(tenantOf(r), items, results)
	out := make([]ackResultWire, len(results))
	for i, res := range results {
		if res.Success {
			s.stats.ackMessages.Add(1)
		}
		if res.DLQ {
			s.stats.dlq.Add(1)
		}
		out[i] = ackResultWire{Index: res.Index, TransactionID: res.TransactionID, Success: res.Success,
			Error: strPtr(res.Error), QueueName: strPtr(res.QueueName), PartitionName: strPtr(res.PartitionName),
			LeaseReleased: res.LeaseReleased, DLQ: res.DLQ}
	}
	writeJSONBytes(w, http.StatusOK, appendAckResults(make([]byte, 0, 160*len(out)), out))
}

func (s *Server) extendLease(w http.ResponseWriter, r *http.Request) {
	leaseID := r.PathValue("leaseId")
	body, err := readObject(r, true)
	if err != nil {
		writeBad(w, err)
		return
	}
	seconds, ok, err := body.integer("seconds", "")
	if err != nil {
		writeBad(w, err)
		return
	}
	if !ok {
		seconds = 60
	}
	if seconds <= 0 || seconds > maxLeaseSeconds {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("seconds must be between 1 and %d", maxLeaseSeconds))
		return
	}
	n, exp, err := s.store.ExtendLease(r.Context(), tenantOf(r), leaseID, seconds)
	if err != nil {
		s.storeError(w, r, "extend lease", err)
		return
	}
	expires := timestampOrNull(exp)
	writeJSON(w, http.StatusOK, leaseExtended{LeaseID: leaseID, Success: n > 0, Renewed: n,
		NewExpiresAt: expires, ExpiresAt: expires, LeaseExpiresAt: expires})
}

func (s *Server) transaction(w http.ResponseWriter, r *http.Request) {
	body, err := readObject(r, false)
	if err != nil {
		writeBad(w, err)
		return
	}
	extras, err := s.parseTxnExtras(body)
	if err != nil {
		writeCodedErr(w, err)
		return
	}
	rawOps, ok, err := body.array("operations", "")
	if err != nil || ((!ok || len(rawOps) == 0) && len(extras.Timers)+len(extras.KV) == 0) {
		writeError(w, http.StatusBadRequest, "operations array is required and must not be empty")
		return
	}
	var leases []string
	if rawLeases, ok, err := body.array("requiredLeases", ""); err != nil {
		writeBad(w, err)
		return
	} else if ok {
		for i, rl := range rawLeases {
			var l string
			if json.Unmarshal(rl, &l) != nil || l == "" {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("requiredLeases[%d] must be a non-empty string", i))
				return
			}
			leases = append(leases, l)
		}
	}
	ops := make([]txn.Op, len(rawOps))
	names := make([]string, len(rawOps))
	for i, raw := range rawOps {
		if ops[i], err = parseTxnOp(raw, i); err != nil {
			writeBad(w, err)
			return
		}
		names[i] = ops[i].Type
	}
	if err := tooManyTxnItems(ops); err != nil {
		writeBad(w, err)
		return
	}
	if denied := s.opsAllowed(r, names); denied != nil {
		writeBad(w, denied)
		return
	}
	txnID := s.ids.New()
	s.stats.transactions.Add(1)
	release, err := s.admit(r, admission.Ack)
	if err != nil {
		return
	}
	results, more, err := txn.Run(r.Context(), s.names, s.writes, txn.Request{Tenant: tenantOf(r), Ops: ops, RequiredLeases: leases, ProducerSub: subOf(r),
		Extras: extras})
	release()
	if s.txnFailed(w, r, txnID, err) {
		return
	}
	s.txnDone(w, r, txnID, results, more, extras)
}

// txnFailed reports whether the transaction failed (err is not nil) and
// then answers it: a rollback or a refused KV precondition is an answer of
// its own (200, success false), too large a KV read a 413, any other error
// the store's.
func (s *Server) txnFailed(w http.ResponseWriter, r *http.Request, txnID string, err error) bool {
	if msg, rolledBack := store.IsRollback(err); rolledBack {
		writeJSON(w, http.StatusOK, txnRolledBack(txnID, msg, store.RollbackReason(err)))
		return true
	}
	var pre *store.KVPrecondition
	if errors.As(err, &pre) {
		writeJSON(w, http.StatusOK, txnKVRefused(txnID, pre))
		return true
	}
	if errors.Is(err, store.ErrKVReadTooLarge) {
		writeCoded(w, http.StatusRequestEntityTooLarge, "payload_too_large", "kv_read_too_large",
			"the transaction's kv reads exceed QUEEN_KV_MAX_READ_BYTES; nothing was written")
		return true
	}
	if err != nil {
		s.storeError(w, r, "transaction", err)
		return true
	}
	return false
}

// txnDone wakes what a committed transaction pushed and timed, and answers
// its results (timers and KV only when the transaction had some).
func (s *Server) txnDone(w http.ResponseWriter, r *http.Request, txnID string, results []txn.Result, more txn.ExtrasResult,
	extras txn.Extras) {
	out, pushed := txnResults(results)
	s.notifyPushed(tenantOf(r), pushed)
	s.hintSweeper(more.Timers)
	answer := txnAnswer{TransactionID: txnID, Success: true, Results: out}
	if len(extras.Timers) > 0 {
		answer.Timers = ptrTo(timerResults(more.Timers))
	}
	if len(extras.KV) > 0 {
		answer.KV = ptrTo(kvResults(more.KV))
	}
	writeJSON(w, http.StatusOK, answer)
}

// parseTxnExtras reads a transaction's timers and kv arrays, as POST
// /api/v1/timers and POST /api/v1/kv read theirs.
func (s *Server) parseTxnExtras(body obj) (txn.Extras, error) {
	x := txn.Extras{MaxKVRead: s.cfg.KVMaxReadBytes}
	var err error
	if raw, ok := body["timers"]; ok && !isNull(raw) {
		if x.Timers, err = s.parseTimerOps(raw); err != nil {
			return x, err
		}
	}
	if raw, ok := body["kv"]; ok && !isNull(raw) {
		if x.KV, err = s.parseKVOps(raw); err != nil {
			return x, err
		}
	}
	return x, nil
}

func parseTxnOp(raw json.RawMessage, i int) (txn.Op, error) {
	path := fmt.Sprintf("operations[%d]", i)
	o, _, err := asObject(raw, path)
	if err != nil {
		return txn.Op{}, err
	}
	path += "."
	typ, _, err := o.str("type", path)
	if err != nil {
		return txn.Op{}, err
	}
	op := txn.Op{Type: typ}
	switch typ {
	case "push":
		items, ok, err := o.array("items", path)
		if err != nil {
			return op, err
		}
		if !ok { // the flat form: the op is the item
			it, err := parseTxnPushItem(raw, path)
			if err != nil {
				return op, err
			}
			op.Items = []store.PushItem{it}
			return op, nil
		}
		if len(items) == 0 {
			return op, bad("%sitems must not be empty", path)
		}
		for j, rawItem := range items {
			it, err := parseTxnPushItem(rawItem, fmt.Sprintf("%sitems[%d].", path, j))
			if err != nil {
				return op, err
			}
			op.Items = append(op.Items, it)
		}
	case "ack":
		if op.Ack, err = parseAck(o, path); err != nil {
			return op, err
		}
		if !ids.Valid(op.Ack.PartitionID) {
			return op, bad("%spartitionId must be a UUID", path)
		}
		if op.Group, _, err = o.limited("consumerGroup", limits.ConsumerGroup, path); err != nil {
			return op, err
		}
	default:
		return op, bad("%stype must be push or ack", path)
	}
	return op, nil
}

// parseTxnPushItem is parsePushItem for a transaction's push operation:
// the same fields, held to the same limits table.
func parseTxnPushItem(raw json.RawMessage, path string) (store.PushItem, error) {
	it, err := parsePushItem(raw, path)
	var refused *limits.Error
	if canary.On("txn-skips-limits") && errors.As(err, &refused) {
		return it, nil // the planted bug: the limits table is not consulted
	}
	return it, err
}
