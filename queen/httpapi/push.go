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
	"github.com/queen-go/queen/queen/txn"
	"github.com/queen-go/queen/queen/waker"
)

// parsePushItem reads one item key by key, keys matched exactly, and
// checks it; path prefixes field names in errors, e.g. "items[3].". It
// reads the items of a push body the typed decode refuses (parsePushFields)
// and of the routes that carry push items inside their own bodies (the
// transaction's push operations, the stream cycle's push_items).
func parsePushItem(raw json.RawMessage, path string) (store.PushItem, error) {
	o, _, err := asObject(raw, path[:len(path)-1])
	if err != nil {
		return store.PushItem{}, err
	}
	var w pushItemWire
	var notString [4]bool
	for i, f := range w.strings() {
		notString[i] = !o.wire(f.name, f.v)
	}
	w.Payload, w.Data = o["payload"], o["data"]
	return w.item(path, notString)
}

// strings lists the item's string fields with their wire names, in the
// order of the checks.
func (w *pushItemWire) strings() [4]struct {
	v    *wireString
	name string
} {
	return [4]struct {
		v    *wireString
		name string
	}{{&w.Queue, "queue"}, {&w.Partition, "partition"}, {&w.TransactionID, "transactionId"}, {&w.TraceID, "traceId"}}
}

// item checks one decoded item, however it was read, and names the first
// field that is wrong: the one place the push rules live. notString marks
// the string fields (in the order of strings) whose value was of another
// type, which only the key-by-key reading sees (the typed decode refuses
// the body); it is not a field of pushItemWire, which the hot path keeps
// small. On a refusal by the limits table the item is returned whole
// beside the error.
func (w *pushItemWire) item(path string, notString [4]bool) (store.PushItem, error) {
	for i, f := range w.strings() {
		if err := notAString(notString[i], path, f.name); err != nil {
			return store.PushItem{}, err
		}
		if i == 0 && w.Queue == "" {
			return store.PushItem{}, bad("%squeue is required", path)
		}
	}
	// Clients send the body as payload (JS also as data); a missing one is
	// stored as JSON null.
	it := store.PushItem{Queue: string(w.Queue), Partition: string(w.Partition), TransactionID: string(w.TransactionID),
		TraceID: string(w.TraceID), Payload: crypt.Plain(w.Payload)}
	if w.Payload == nil {
		it.Payload = crypt.Plain(w.Data)
	}
	return it, checkPushItem(it, path)
}

// parsePushBody decodes and checks a push body: in one pass when its values
// fit the typed structs (decodePushWires), else key by key, so that the
// answer names the field whose value does not fit.
func parsePushBody(body []byte) ([]store.PushItem, error) {
	wires, ok, err := decodePushWires(body)
	if err != nil {
		return nil, err
	}
	if !ok {
		return parsePushFields(body)
	}
	items := make([]store.PushItem, len(wires))
	for i := range wires {
		if items[i], err = wires[i].item(fmt.Sprintf("items[%d].", i), [4]bool{}); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// parsePushFields reads a push body the typed decode refused, key by key:
// its keys are matched exactly (encoding/json's struct decoding also takes
// them in another case), and the first item that is wrong is named.
func parsePushFields(raw []byte) ([]store.PushItem, error) {
	body, err := decodeObject(raw)
	if err != nil {
		return nil, err
	}
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

// decodePushWires decodes a push body into its items' wire structs: by
// hand when the body is the common kind (decodePushFast), else with
// encoding/json into the same structs; ok is false when the body does not
// fit them (a value of another type, items not an array of objects).
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
func tooManyTxnItems(ops []txn.Op) error {
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

// checkPushItem holds an item's fields to what the database stores
// (queen/limits).
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
	return parsePushBody(raw)
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
