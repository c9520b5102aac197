package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/txn"
)

// ackObject is one acknowledgement read key by key with the consumerGroup
// beside it: the single ack's body, a transaction's ack operation.
type ackObject struct {
	w     ackItemWire
	group wireString
	f     itemFlags // bit 5 of f.wrong: the consumerGroup's
}

// readAckObject reads an ackObject from raw; ok is false for a raw that is
// no JSON object.
func readAckObject(raw []byte) (a ackObject, ok bool) {
	s := scan{b: raw, exact: true}
	ok = ackItem(&s, &a.w, &a.f, &a.group)
	s.space()
	return a, ok && !a.f.notObject && s.i == len(s.b)
}

// parseAck reads and checks the single ack's body.
func parseAck(body []byte) (group string, item store.AckItem, err error) {
	a, ok := readAckObject(body)
	if !ok {
		return "", item, invalidBody(body)
	}
	if item, err = a.w.item("", a.f.wrong, true); err != nil {
		return "", item, err
	}
	return string(a.group), item, checkGroup("", a.group, a.f.wrong&(1<<5) != 0)
}

// checkGroup checks a consumerGroup read beside acknowledgements; wrong:
// its value was of another type.
func checkGroup(path string, g wireString, wrong bool) error {
	if wrong {
		return bad("%sconsumerGroup must be a string", path)
	}
	return limits.ConsumerGroup.Check(path, string(g))
}

// item checks one decoded acknowledgement and names the first field that
// is wrong: the one place the ack rules live, for the single ack, the
// batch and the transaction's ack operations. wrong marks the fields (bit
// i: ackFields[i]) whose value was of another type; a transactionId or
// partitionId of another type is as good as absent. The transactionId's
// limits come right after its presence when the item was read key by key,
// and last when encoding/json decoded the batch, as each reading always
// answered; the two orders differ only in which of two refusals is named.
func (w *ackItemWire) item(path string, wrong uint8, keyByKey bool) (store.AckItem, error) {
	a := store.AckItem{TransactionID: string(w.TransactionID), PartitionID: string(w.PartitionID),
		Status: string(w.Status), LeaseID: string(w.LeaseID), Error: string(w.Error)}
	if a.TransactionID == "" {
		return a, bad("%stransactionId is required", path)
	}
	if keyByKey {
		if err := limits.TransactionID.Check(path, a.TransactionID); err != nil {
			return a, err
		}
	}
	if a.PartitionID == "" {
		return a, bad("%spartitionId is required to ensure message uniqueness", path)
	}
	for i, f := range [...]limits.Field{limits.Status, limits.LeaseID, limits.ErrorText} {
		if wrong&(1<<(2+i)) != 0 {
			return a, bad("%s%s must be a string", path, f.Name)
		}
		if err := f.Check(path, string(*w.field(2 + i))); err != nil {
			return a, err
		}
	}
	if !keyByKey {
		return a, limits.TransactionID.Check(path, a.TransactionID)
	}
	return a, nil
}

func (s *Server) ack(w http.ResponseWriter, r *http.Request) {
	s.stats.ackRequests.Add(1)
	body, err := readBody(r, false)
	if err != nil {
		writeBad(w, err)
		return
	}
	group, item, err := parseAck(body)
	if err != nil {
		writeBad(w, err)
		return
	}
	s.applyAcks(w, r, group, []store.AckItem{item})
}

// ackBatchFields are the ack batch's keys.
var ackBatchFields = []string{"acknowledgments", "consumerGroup"}

// parseAckBatch decodes and checks an ack batch (decode.go tells the two
// rules it is read by): as encoding/json decodes it when it takes the
// body, else as read key by key, the first wrong field named.
func parseAckBatch(body []byte) (group string, items []store.AckItem, err error) {
	s := scan{b: body}
	var l list[ackItemWire]
	var g wireString
	var gf itemFlags
	ok := scanBody(&s, &l, ackBatchFields, &g, &gf)
	switch {
	case !ok:
		return "", nil, invalidBody(body)
	case !s.refused && l.has:
		return typedAcks(body, &l, g)
	case s.folded:
		s, l, g, gf = scan{b: body, exact: true}, list[ackItemWire]{}, "", itemFlags{}
		scanBody(&s, &l, ackBatchFields, &g, &gf)
	}
	if !l.has {
		return "", nil, bad("acknowledgments array is required")
	}
	if err := checkGroup("", g, gf.wrong != 0); err != nil {
		return "", nil, err
	}
	items = make([]store.AckItem, len(l.items))
	for i := range l.items {
		path := "acknowledgments[" + strconv.Itoa(i) + "]."
		f := l.flag(i)
		if f.notObject {
			return "", nil, bad("%s must be an object", path[:len(path)-1])
		}
		if items[i], err = l.items[i].item(path, f.wrong, true); err != nil {
			return "", nil, err
		}
	}
	return string(g), items, nil
}

// typedAcks checks an ack batch that encoding/json takes, as it decodes
// it: l itself but for a body whose acknowledgments came twice (see
// typedItems).
func typedAcks(body []byte, l *list[ackItemWire], g wireString) (string, []store.AckItem, error) {
	acks := l.items
	if l.merged {
		acks, g = mergedAcks(body, acks, g)
	}
	if err := limits.ConsumerGroup.Check("", string(g)); err != nil {
		return "", nil, err
	}
	items := make([]store.AckItem, len(acks))
	for i := range acks {
		var err error
		if items[i], err = acks[i].item("acknowledgments["+strconv.Itoa(i)+"].", 0, false); err != nil {
			return "", nil, err
		}
	}
	return string(g), items, nil
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

// mergedAcks is typedAcks' call of encoding/json (apart, so that the
// common path allocates no ackBatchBody).
func mergedAcks(body []byte, acks []ackItemWire, g wireString) ([]ackItemWire, wireString) {
	var b ackBatchBody
	if json.Unmarshal(body, &b) != nil || b.Acknowledgments == nil {
		return acks, g
	}
	return *b.Acknowledgments, b.ConsumerGroup
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
	results, err := s.ackRouted(ctx, tenantOf(r), group, items)
	release()
	if err != nil && s.routedFailed(w, r, "cross_shard_ack", err) {
		return
	}
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
	n, exp, err := s.extendOn(r.Context(), tenantOf(r), leaseID, seconds)
	if err != nil && s.routedFailed(w, r, "", err) {
		return
	}
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
	pl, err := s.txnPlane(r.Context(), tenantOf(r), ops, extras)
	if err != nil {
		s.txnUnrouted(w, r, err)
		return
	}
	txnID := s.ids.New()
	s.stats.transactions.Add(1)
	release, err := s.admit(r, admission.Ack)
	if err != nil {
		return
	}
	req := txn.Request{Tenant: tenantOf(r), Ops: ops, RequiredLeases: leases, ProducerSub: subOf(r), Extras: extras}
	results, more, err := txn.Run(r.Context(), pl.names, pl.writes, req)
	if s.movedOnce(err, req.Tenant, func() []string { return txnQueues(ops) }) {
		results, more, err = s.txnAgain(r.Context(), req, pl)
	}
	release()
	if err != nil && s.routedFailed(w, r, "cross_shard_transaction", err) {
		return
	}
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
		a, _ := readAckObject(raw) // raw is an object: asObject has read it
		if op.Ack, err = a.w.item(path, a.f.wrong, true); err != nil {
			return op, err
		}
		if !ids.Valid(op.Ack.PartitionID) {
			return op, bad("%spartitionId must be a UUID", path)
		}
		op.Group = string(a.group)
		if err := checkGroup(path, a.group, a.f.wrong&(1<<5) != 0); err != nil {
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
