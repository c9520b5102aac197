package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/pushpath"
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
		it.Payload = crypt.Plain(p)
	} else if d, ok := o["data"]; ok {
		it.Payload = crypt.Plain(d)
	}
	return it, checkPushItem(it, path)
}

// parsePushTyped decodes a well-formed push body into items; ok is false
// when the body does not fit the typed shape (the caller then re-reads it
// field by field to name the bad field). Field-level rules that the types
// cannot express answer their own 400 here.
func parsePushTyped(body []byte) (items []store.PushItem, ok bool, err error) {
	wires, ok, err := decodePushWires(body)
	if !ok || err != nil {
		return nil, ok, err
	}
	items = make([]store.PushItem, len(wires))
	for i, w := range wires {
		path := fmt.Sprintf("items[%d].", i)
		if w.Queue == nil || *w.Queue == "" {
			return nil, true, bad("%squeue is required", path)
		}
		it := store.PushItem{Queue: *w.Queue, Payload: crypt.Plain(w.Payload)}
		if w.Payload == nil {
			it.Payload = crypt.Plain(w.Data)
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

// decodePushWires decodes a push body into its items' wire structs: by
// hand when the body is the common kind (decodePushFast), else with
// encoding/json; ok is false when the body does not fit the typed shape.
// More items than limits.PushItems is a 413 (the hand-written decoder
// stops reading there).
func decodePushWires(body []byte) ([]pushItemWire, bool, error) {
	wires, ok, over := decodePushFastMax(body, limits.PushItems.Max)
	if over {
		return nil, true, tooManyItems(limits.PushItems.Max + 1)
	}
	if ok {
		return wires, true, nil
	}
	var b pushBody
	if json.Unmarshal(body, &b) != nil || b.Items == nil {
		return nil, false, nil
	}
	return *b.Items, true, tooManyItems(len(*b.Items))
}

// tooManyTxnItems applies limits.PushItems to a transaction: its push
// operations together are one push.
func tooManyTxnItems(ops []store.TxnOp) error {
	n := 0
	for _, op := range ops {
		n += len(op.Items)
	}
	if err := limits.PushItems.Check("operations[].", n); err != nil {
		return &badRequest{http.StatusRequestEntityTooLarge, err.Error()}
	}
	return nil
}

// tooManyItems refuses a push of more items than limits.PushItems allows:
// 413, the request is too large, naming the field; nothing is written.
func tooManyItems(n int) error {
	if err := limits.PushItems.Check("", n); err != nil {
		return &badRequest{http.StatusRequestEntityTooLarge, err.Error()}
	}
	return nil
}

// checkPushItem applies the rules both parsers share: every field within
// what the database stores (queen/limits).
func checkPushItem(it store.PushItem, path string) error {
	if err := limits.CheckAll(path, limits.Value{Field: limits.Queue, V: it.Queue}, limits.Value{Field: limits.Partition, V: it.Partition},
		limits.Value{Field: limits.TransactionID, V: it.TransactionID}, limits.Value{Field: limits.TraceID, V: it.TraceID}); err != nil {
		return err
	}
	return limits.JSON(path+"payload", it.Payload.Raw())
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
	if err := tooManyItems(len(rawItems)); err != nil {
		return nil, err
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
	out, err := s.pushes.Push(r.Context(), tenant, subOf(r), items)
	switch {
	case errors.Is(err, pushpath.ErrCancelled):
		return
	case err != nil:
		s.storeError(w, r, "push", err)
		return
	case out.Buffered != nil:
		if out.DBError {
			s.stats.dbErrors.Add(1)
		}
		s.writeBuffered(w, out)
		return
	}
	s.notifyPushed(tenant, out.Results)
	for _, res := range out.Results {
		if res.Status == "queued" {
			s.stats.pushMessages.Add(1)
			s.queueMessages.add(tenant, res.QueueName, "push", 1)
		}
	}
	s.recordPushed(tenant, out.Results)
	writeJSONBytes(w, http.StatusCreated, appendPushResults(make([]byte, 0, 256*len(out.Results)), pushResults(out.Results)))
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

// writeBuffered answers a push that went to the spool: 201 with status
// "buffered" per item, or 500 with status "failed" when the spool could not
// keep it.
func (s *Server) writeBuffered(w http.ResponseWriter, o pushpath.Outcome) {
	out := bufferedPushes(o)
	if o.SpoolErr != nil {
		writeJSON(w, http.StatusInternalServerError, out)
		return
	}
	s.stats.buffered.Add(int64(len(o.Buffered)))
	writeJSON(w, http.StatusCreated, out)
}
