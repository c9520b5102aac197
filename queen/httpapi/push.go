package httpapi

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/txn"
	"github.com/queen-go/queen/queen/waker"
)

// itemsField is the push body's one field.
var itemsField = []string{"items"}

// parsePushBody decodes and checks a push body (decode.go tells the two
// rules it is read by): the items as encoding/json decodes them when it
// takes the body, else as read key by key, the first wrong field named.
func parsePushBody(body []byte) ([]store.PushItem, error) {
	s := scan{b: body, max: limits.PushItems.Max}
	var l list[pushItemWire]
	ok := scanBody(&s, &l, itemsField, nil, nil)
	switch {
	case s.over:
		return nil, tooManyItems(limits.PushItems.Max + 1)
	case !ok:
		return nil, invalidBody(body)
	case !s.refused && l.has:
		return pushItems(typedItems(body, &l), false)
	case s.folded:
		s, l = scan{b: body, exact: true}, list[pushItemWire]{}
		scanBody(&s, &l, itemsField, nil, nil)
	}
	if !l.has {
		return nil, bad("items array is required")
	}
	return pushItems(&l, true)
}

// typedItems is the items of a body encoding/json takes: l itself but for
// a body whose items array came twice, which encoding/json decodes into
// the earlier array's elements (the one body it decodes itself), so a push
// reads every body encoding/json takes as encoding/json does, as the ack
// batch does (TestPushDuplicateItems).
func typedItems(body []byte, l *list[pushItemWire]) *list[pushItemWire] {
	if !l.merged {
		return l
	}
	return mergedItems(body, l)
}

// mergedItems is typedItems' call of encoding/json (apart, so that the
// common path allocates no pushBody).
func mergedItems(body []byte, l *list[pushItemWire]) *list[pushItemWire] {
	var b pushBody
	if json.Unmarshal(body, &b) != nil || b.Items == nil {
		return l
	}
	return &list[pushItemWire]{items: *b.Items, has: true}
}

// pushItems checks a push's items and names the first that is wrong;
// keyByKey: as the key-by-key rule reads them (an entry that is no object
// is refused, and a field's value of another type named).
func pushItems(l *list[pushItemWire], keyByKey bool) ([]store.PushItem, error) {
	if err := tooManyItems(len(l.items)); err != nil {
		return nil, err
	}
	items := make([]store.PushItem, len(l.items))
	for i := range l.items {
		var f itemFlags
		if keyByKey {
			f = l.flag(i)
		}
		path := "items[" + strconv.Itoa(i) + "]."
		if f.notObject {
			return nil, bad("%s must be an object", path[:len(path)-1])
		}
		var err error
		if items[i], err = l.items[i].item(path, f.wrong); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// parsePushItem reads one push item that a route carries inside its own
// body (a transaction's push operation, a stream cycle's push_items), key
// by key, and checks it; path prefixes field names in errors, e.g.
// "operations[0].items[3].".
func parsePushItem(raw json.RawMessage, path string) (store.PushItem, error) {
	s := scan{b: raw, exact: true}
	var w pushItemWire
	var f itemFlags
	pushItem(&s, &w, &f) // raw is one JSON value: encoding/json has read it
	if f.notObject {
		return store.PushItem{}, bad("%s must be an object", path[:len(path)-1])
	}
	return w.item(path, f.wrong)
}

// item checks one decoded item, however it was read, and names the first
// field that is wrong: the one place the push rules live. wrong marks the
// string fields (bit i: pushFields[i]) whose value was of another type,
// which only the key-by-key rule answers (encoding/json refuses the body).
// On a refusal by the limits table the item is returned whole beside the
// error.
func (w *pushItemWire) item(path string, wrong uint8) (store.PushItem, error) {
	for i := range 4 {
		if wrong&(1<<i) != 0 {
			return store.PushItem{}, bad("%s%s must be a string", path, pushFields[i])
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

// invalidBody answers a body that is no JSON object, in encoding/json's
// words (the scanner agrees with it on what is JSON: FuzzPushDecodersAgree).
func invalidBody(body []byte) error {
	if _, err := decodeObject(body); err != nil {
		return err
	}
	return bad("Invalid JSON")
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
	out, err := s.pushRouted(r.Context(), tenant, subOf(r), items)
	switch {
	case errors.Is(err, pushpath.ErrCancelled):
		return
	case err != nil && s.routedFailed(w, r, "cross_shard_push", err):
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
