package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/waker"
)

// parsePushItem validates one item. path prefixes field names in errors,
// e.g. "items[3].".
func parsePushItem(raw json.RawMessage, path string) (store.PushItem, error) {
	var it store.PushItem
	o, _, err := asObject(raw, path[:len(path)-1])
	if err != nil {
		return it, err
	}
	q, ok, err := o.str("queue", path)
	if err != nil {
		return it, err
	}
	if !ok || q == "" {
		return it, bad("%squeue is required", path)
	}
	it.Queue = q
	if it.Partition, _, err = o.str("partition", path); err != nil {
		return it, err
	}
	if it.TransactionID, _, err = o.str("transactionId", path); err != nil {
		return it, err
	}
	if it.TraceID, _, err = o.str("traceId", path); err != nil {
		return it, err
	}
	// Clients send the body as payload (JS also as data); a missing one is
	// stored as JSON null.
	if p, ok := o["payload"]; ok {
		it.Payload = p
	} else if d, ok := o["data"]; ok {
		it.Payload = d
	}
	return it, checkPushItem(it, path)
}

// parsePushTyped decodes a well-formed push body into items; ok is false
// when the body does not fit the typed shape (the caller then re-reads it
// field by field to name the bad field). Field-level rules that the types
// cannot express answer their own 400 here.
func parsePushTyped(body []byte) (items []store.PushItem, ok bool, err error) {
	var b pushBody
	if json.Unmarshal(body, &b) != nil || b.Items == nil {
		return nil, false, nil
	}
	items = make([]store.PushItem, len(*b.Items))
	for i, w := range *b.Items {
		path := fmt.Sprintf("items[%d].", i)
		if w.Queue == nil || *w.Queue == "" {
			return nil, true, bad("%squeue is required", path)
		}
		it := store.PushItem{Queue: *w.Queue, Payload: w.Payload}
		if it.Payload == nil {
			it.Payload = w.Data
		}
		if w.Partition != nil {
			it.Partition = *w.Partition
		}
		if w.TransactionID != nil {
			it.TransactionID = *w.TransactionID
		}
		if w.TraceID != nil {
			it.TraceID = *w.TraceID
		}
		if err := checkPushItem(it, path); err != nil {
			return nil, true, err
		}
		items[i] = it
	}
	return items, true, nil
}

// checkPushItem applies the rules both parsers share: every field within
// what the database stores (queen/limits).
func checkPushItem(it store.PushItem, path string) error {
	for _, c := range []struct {
		f limits.Field
		v string
	}{{limits.Queue, it.Queue}, {limits.Partition, it.Partition}, {limits.TransactionID, it.TransactionID}, {limits.TraceID, it.TraceID}} {
		if err := c.f.Check(path, c.v); err != nil {
			return err
		}
	}
	return limits.JSON(path+"payload", it.Payload)
}

func (s *Server) parsePush(r *http.Request) ([]store.PushItem, error) {
	raw, err := readBody(r, false)
	if err != nil {
		return nil, err
	}
	if items, ok, err := parsePushTyped(raw); ok {
		return items, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		if err == nil {
			return nil, bad("Invalid JSON: body must be an object")
		}
		return nil, bad("Invalid JSON: %v", err)
	}
	body := obj(m)
	rawItems, ok, err := body.array("items", "")
	if err != nil || !ok {
		return nil, bad("items array is required")
	}
	items := make([]store.PushItem, len(rawItems))
	for i, raw := range rawItems {
		if items[i], err = parsePushItem(raw, fmt.Sprintf("items[%d].", i)); err != nil {
			return nil, err
		}
	}
	return items, nil
}

func (s *Server) push(w http.ResponseWriter, r *http.Request) {
	s.stats.pushRequests.Add(1)
	items, err := s.parsePush(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	if len(items) == 0 {
		writeJSON(w, http.StatusCreated, []any{})
		return
	}
	tenant := tenantOf(r)
	for i := range items {
		// Mint missing transactionIds up front: a push that ends up in the
		// spool must replay under the same id it may already have
		// committed under.
		if items[i].TransactionID == "" {
			items[i].TransactionID = s.ids.New()
		}
	}
	if s.spool != nil && (s.maint.Push() || !s.spool.Healthy()) {
		s.buffer(w, r, tenant, items)
		return
	}
	release, err := s.admit(r, admission.Push)
	if err != nil {
		return
	}
	results, err := s.store.Push(r.Context(), tenant, items, subOf(r))
	release()
	if err != nil {
		if s.spool != nil && store.Unavailable(err) && r.Context().Err() == nil {
			s.stats.dbErrors.Add(1)
			switch {
			case store.Contention(err):
				// The database is up; this push lost a lock race
				// several times over. Keep it, but do not send every
				// later push to disk.
				s.log.Warn("push: lock contention outlasted the retries; buffering this push only", "err", err)
			case s.databaseAnswers(r.Context()):
				// Timed out queueing behind a busy partition, or one
				// connection broke: the database itself answers.
				s.log.Warn("push: failed, but the database answers; buffering this push only", "err", err)
			default:
				s.log.Warn("push: database unavailable; buffering to the spool", "err", err)
				s.spool.SetHealthy(false)
			}
			s.buffer(w, r, tenant, items)
			return
		}
		s.storeError(w, r, "push", err)
		return
	}
	s.notifyPushed(tenant, results)
	for _, res := range results {
		if res.Status == "queued" {
			s.stats.pushMessages.Add(1)
			s.queueMessages.WithLabelValues(tenant, res.QueueName, "push").Inc()
		}
	}
	writeJSON(w, http.StatusCreated, pushResults(results))
}

// Notify wakes pops parked on a queue whose partitions just got messages
// (per group, one pop per partition), here and on the peers. The sweeper
// calls it for the timers it fired.
func (s *Server) Notify(tenant, queue string, partitionIDs []string) {
	s.wake.Notify(waker.Key(tenant, queue), len(partitionIDs))
	s.wake.Notify(waker.Key(tenant, ""), len(partitionIDs))
	s.peers.MessageAvailable(tenant, queue, partitionIDs)
}

// notifyPushed wakes pops parked on the queues that just got messages: per
// group, one pop per partition that got some.
func (s *Server) notifyPushed(tenant string, results []store.PushResult) {
	parts := map[string]map[string]bool{}
	total := map[string]bool{}
	for _, res := range results {
		if res.Status != "queued" {
			continue
		}
		if parts[res.QueueName] == nil {
			parts[res.QueueName] = map[string]bool{}
		}
		parts[res.QueueName][res.PartitionID] = true
		total[res.PartitionID] = true
	}
	for queue, ps := range parts {
		s.wake.Notify(waker.Key(tenant, queue), len(ps))
		s.peers.MessageAvailable(tenant, queue, slices.Collect(maps.Keys(ps)))
	}
	if len(total) > 0 {
		s.wake.Notify(waker.Key(tenant, ""), len(total))
	}
}

// databaseAnswers asks the drain's probe (its own connection) whether the
// database is up, so that one failed push does not send every later push on
// this broker to disk when only that push had a problem.
func (s *Server) databaseAnswers(ctx context.Context) bool {
	return s.drainer != nil && s.drainer.Ping != nil && s.drainer.Ping(ctx) == nil
}

// buffer appends the items to the spool and answers 201 with status
// "buffered" per item, or 500 with status "failed" when the spool could not
// keep them.
func (s *Server) buffer(w http.ResponseWriter, r *http.Request, tenant string, items []store.PushItem) {
	evs := make([]spool.Event, len(items))
	for i, it := range items {
		part := it.Partition
		if part == "" {
			part = store.DefaultPartition
		}
		evs[i] = spool.Event{Tenant: tenant, Queue: it.Queue, Partition: part, TransactionID: it.TransactionID,
			TraceID: it.TraceID, ProducerSub: subOf(r), Payload: it.Payload}
		if len(evs[i].Payload) == 0 {
			evs[i].Payload = json.RawMessage("null")
		}
		// With a key, nothing reaches the disk in the clear: whether the
		// queue asks for encryption is the replay's to decide.
		if s.cipher != nil {
			sealed, err := s.cipher.Seal(evs[i].Payload)
			if err != nil {
				s.log.Error("push: sealing a spooled payload failed", "err", err)
				writeError(w, http.StatusInternalServerError, "could not seal the payload for the spool")
				return
			}
			evs[i].Payload, evs[i].Encrypted = sealed, true
		}
	}
	err := s.spool.Append(evs)
	out := make([]map[string]any, len(items))
	for i, e := range evs {
		out[i] = map[string]any{"index": i, "status": "buffered", "queue": e.Queue, "queueName": e.Queue,
			"partition": e.Partition, "transactionId": e.TransactionID, "transaction_id": e.TransactionID}
		if err != nil {
			out[i]["status"], out[i]["error"] = "failed", "File buffer write failed: "+err.Error()
		}
	}
	if err != nil {
		s.log.Error("push: spool write failed", "err", err)
		writeJSON(w, http.StatusInternalServerError, out)
		return
	}
	s.stats.buffered.Add(int64(len(items)))
	writeJSON(w, http.StatusCreated, out)
}
