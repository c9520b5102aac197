package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/queen-go/queen/queen/crypt"
	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/streams"
)

// The streaming SDKs' routes (contract-streams.md): register a query,
// commit a cycle, read state. Top-level fields are snake_case, as the SDKs
// send them; ack and push items are camelCase.

// registerQuery is POST /streams/v1/queries.
func (s *Server) registerQuery(w http.ResponseWriter, r *http.Request) {
	body, err := readStreamsBody(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	p := store.RegisterParams{Tenant: tenantOf(r)}
	for _, f := range []struct {
		name  string
		field limits.Field
		dst   *string
	}{{"name", limits.StreamQuery, &p.Name}, {"source_queue", limits.Queue, &p.SourceQueue}, {"config_hash", limits.StreamQuery, &p.ConfigHash}} {
		v, _, err := body.limited(f.name, f.field, "")
		if err != nil {
			writeBad(w, err)
			return
		}
		if v == "" {
			writeError(w, http.StatusBadRequest, f.name+" is required")
			return
		}
		*f.dst = v
	}
	if p.SinkQueue, _, err = body.limited("sink_queue", limits.Queue, ""); err != nil {
		writeBad(w, err)
		return
	}
	if p.Reset, _, err = body.boolean("reset", ""); err != nil {
		writeBad(w, err)
		return
	}
	q, err := s.store.RegisterQuery(r.Context(), p)
	var mismatch *store.ErrConfigHashMismatch
	var denied *store.ErrStreamsDenied
	if errors.As(err, &denied) {
		writeJSON(w, http.StatusForbidden, streamsDenied{Denied: true, Error: denied.Reason})
		return
	}
	if errors.As(err, &mismatch) {
		writeJSON(w, http.StatusConflict, configHashMismatch{QueryID: mismatch.QueryID, Name: p.Name,
			Error: fmt.Sprintf("config_hash mismatch: operator chain changed for queryId '%s'. Pass reset:true to wipe existing state, or use a new queryId.", p.Name)})
		return
	}
	if err != nil {
		s.storeError(w, r, "register query", err)
		return
	}
	writeJSON(w, http.StatusOK, newRegisteredQuery(q))
}

// readStreamsBody reads a JSON object body, with the streams routes' texts.
func readStreamsBody(r *http.Request) (obj, error) {
	raw, err := readBody(r, false)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		var v any
		if json.Unmarshal(raw, &v) == nil {
			return nil, bad("request body must be a JSON object")
		}
		return nil, bad("Invalid JSON: %v", err)
	}
	if m == nil {
		return nil, bad("request body must be a JSON object")
	}
	return m, nil
}

// streamIDs reads the query_id and partition_id every cycle and state read
// names: both required, both UUIDs.
func streamIDs(body obj) (query, partition string, err error) {
	for _, f := range []struct {
		name string
		dst  *string
	}{{"query_id", &query}, {"partition_id", &partition}} {
		v, _, err := body.str(f.name, "")
		if err != nil {
			return "", "", err
		}
		if v == "" {
			return "", "", bad("%s is required", f.name)
		}
		if !ids.Valid(v) {
			return "", "", bad("%s must be a UUID", f.name)
		}
		*f.dst = v
	}
	return query, partition, nil
}

// ownsStreamPartition answers 404 when tenancy is on and the partition is
// not the caller's (Rust's model: refused before any transaction, so a
// tenant cannot probe another's partitions). With tenancy off every
// partition is the default tenant's, and an unknown one is the cycle's
// business failure "partition not found", as in Queen's C++ broker.
func (s *Server) ownsStreamPartition(w http.ResponseWriter, r *http.Request, partition string) bool {
	if !s.cfg.TenancyHeader {
		return true
	}
	owned, err := s.store.PartitionOwned(r.Context(), tenantOf(r), partition)
	if err != nil {
		s.storeError(w, r, "partition owner", err)
		return false
	}
	if !owned {
		writeError(w, http.StatusNotFound, "not found")
	}
	return owned
}

// cycle is POST /streams/v1/cycle.
func (s *Server) cycle(w http.ResponseWriter, r *http.Request) {
	p, err := s.cycleParams(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	p.Tenant, p.ProducerSub = tenantOf(r), subOf(r)
	if !s.ownsStreamPartition(w, r, p.PartitionID) {
		return
	}
	res, err := streams.Cycle(r.Context(), s.names, s.writes, p)
	if msg, ok := store.IsRollback(err); ok {
		writeJSON(w, http.StatusOK, rolledBackCycle(p, msg))
		return
	}
	if err != nil {
		s.storeError(w, r, "cycle", err)
		return
	}
	s.notifyPushed(p.Tenant, res.Pushed)
	writeJSON(w, http.StatusOK, committedCycle(p, res))
}

// cycleParams reads a cycle body. Null or missing lists are empty, a null
// ack is a flush cycle, release_lease defaults to true.
func (s *Server) cycleParams(r *http.Request) (streams.CycleParams, error) {
	var p streams.CycleParams
	body, err := readStreamsBody(r)
	if err != nil {
		return p, err
	}
	if p.QueryID, p.PartitionID, err = streamIDs(body); err != nil {
		return p, err
	}
	if p.Group, _, err = body.limited("consumer_group", limits.ConsumerGroup, ""); err != nil {
		return p, err
	}
	if p.Group == "" {
		p.Group = store.QueueModeGroup
	}
	release, has, err := body.boolean("release_lease", "")
	if err != nil {
		return p, err
	}
	p.ReleaseLease = release || !has
	if p.State, err = stateOps(body); err != nil {
		return p, err
	}
	items, _, err := body.array("push_items", "")
	if err != nil {
		return p, err
	}
	for i, raw := range items {
		it, err := parsePushItem(raw, fmt.Sprintf("push_items[%d].", i))
		if err != nil {
			return p, err
		}
		if it.Payload.Empty() {
			it.Payload = crypt.Plain(json.RawMessage(`{}`))
		}
		p.Push = append(p.Push, it)
	}
	p.Ack, err = cycleAck(body)
	return p, err
}

func stateOps(body obj) ([]streams.StateOp, error) {
	raws, _, err := body.array("state_ops", "")
	if err != nil {
		return nil, err
	}
	ops := make([]streams.StateOp, len(raws))
	for i, raw := range raws {
		path := fmt.Sprintf("state_ops[%d].", i)
		o, _, err := asObject(raw, path[:len(path)-1])
		if err != nil {
			return nil, err
		}
		typ, _, err := o.str("type", path)
		if err != nil {
			return nil, err
		}
		key, hasKey, err := o.limited("key", limits.StreamKey, path)
		if err != nil {
			return nil, err
		}
		if !hasKey {
			return nil, bad("%skey is required", path)
		}
		switch typ {
		case "upsert":
			ops[i] = streams.StateOp{Key: key, Value: o["value"]}
			if isNull(o["value"]) {
				ops[i].Value = nil // stored as {}
			} else if err := limits.JSON(path+"value", o["value"]); err != nil {
				return nil, err
			}
		case "delete":
			ops[i] = streams.StateOp{Key: key, Delete: true}
		default:
			return nil, bad("%stype must be upsert or delete", path)
		}
	}
	return ops, nil
}

func cycleAck(body obj) (*streams.CycleAck, error) {
	o, ok, err := body.object("ack", "")
	if err != nil || !ok {
		return nil, err
	}
	a := &streams.CycleAck{Count: 1, Completed: true}
	if a.TransactionID, _, err = o.limited("transactionId", limits.TransactionID, "ack."); err != nil {
		return nil, err
	}
	if a.TransactionID == "" {
		return nil, bad("ack.transactionId is required")
	}
	if a.LeaseID, _, err = o.limited("leaseId", limits.LeaseID, "ack."); err != nil {
		return nil, err
	}
	status, _, err := o.str("status", "ack.")
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(status) {
	case "", "completed", "success", "acked", "ok":
	default:
		a.Completed = false // a nack: the lease goes back, the cursor stays
	}
	if n, ok, err := o.integer("count", "ack."); err != nil {
		return nil, err
	} else if ok {
		if n < 0 {
			return nil, bad("ack.count must not be negative")
		}
		a.Count = n
	}
	return a, nil
}

// stateGet is POST /streams/v1/state/get.
func (s *Server) stateGet(w http.ResponseWriter, r *http.Request) {
	body, err := readStreamsBody(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	query, partition, err := streamIDs(body)
	if err != nil {
		writeBad(w, err)
		return
	}
	if !s.ownsStreamPartition(w, r, partition) {
		return
	}
	var f store.StateFilter
	var keys []json.RawMessage
	if err := json.Unmarshal(body["keys"], &keys); err == nil {
		for _, k := range keys {
			var key string
			if err := json.Unmarshal(k, &key); err != nil {
				writeError(w, http.StatusBadRequest, "keys must be an array of strings")
				return
			}
			f.Keys = append(f.Keys, key)
		}
	}
	if f.KeyPrefix, _, err = body.limited("key_prefix", limits.StreamKey, ""); err != nil {
		writeBad(w, err)
		return
	}
	var ripe float64
	if json.Unmarshal(body["ripe_at_or_before"], &ripe) == nil && !isNull(body["ripe_at_or_before"]) {
		f.RipeAt = &ripe
	}
	rows, err := s.store.StateGet(r.Context(), tenantOf(r), query, partition, f)
	if err != nil {
		s.storeError(w, r, "state get", err)
		return
	}
	writeJSON(w, http.StatusOK, newStateRows(rows))
}
