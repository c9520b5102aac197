package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store"
)

// Traces (contract-admin.md section 5): events a consumer records against
// a message, read back per message, per name, and as a list of names. The
// keys are snake_case, as Queen answers; camelCase aliases serve queenctl.

// recordTrace is POST /api/v1/traces.
func (s *Server) recordTrace(w http.ResponseWriter, r *http.Request) {
	p, err := s.traceParams(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	p.Tenant = tenantOf(r)
	var id string
	err = s.partitionRouted(r.Context(), p.Tenant, p.PartitionID, func(pl *plane, epoch int64) (err error) {
		p.Epoch = epoch
		id, err = pl.store.RecordTrace(r.Context(), p)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		writeJSON(w, http.StatusNotFound, failureAnswer{Success: false, Error: "Message not found"})
		return
	}
	if s.routedFailed(w, r, "cross_shard_partition", err) {
		return
	}
	if err != nil {
		s.storeError(w, r, "trace", err)
		return
	}
	writeJSON(w, http.StatusCreated, traceRecorded{Success: true, TraceID: id})
}

// traceParams reads a trace body: transactionId, partitionId and data are
// required; consumerGroup and eventType default (null counts as absent);
// traceNames is null, a string or an array of strings.
func (s *Server) traceParams(r *http.Request) (store.TraceParams, error) {
	p := store.TraceParams{ConsumerGroup: store.QueueModeGroup, EventType: "info", WorkerID: s.cfg.ServerID}
	body, err := readObject(r, false)
	if err != nil {
		return p, err
	}
	txid, hasTxid, err := body.limited("transactionId", limits.TransactionID, "")
	if err != nil {
		return p, err
	}
	pid, hasPid, err := body.str("partitionId", "")
	if err != nil {
		return p, err
	}
	if !hasTxid || !hasPid || txid == "" || pid == "" {
		return p, bad("transactionId and partitionId are required")
	}
	if !ids.Valid(pid) {
		return p, bad("partitionId must be a UUID")
	}
	if isNull(body["data"]) {
		return p, bad("data is required")
	}
	if err := limits.JSON("data", body["data"]); err != nil {
		return p, err
	}
	p.TransactionID, p.PartitionID, p.Data = txid, pid, body["data"]
	if g, ok, err := body.limited("consumerGroup", limits.ConsumerGroup, ""); err != nil {
		return p, err
	} else if ok && g != "" {
		p.ConsumerGroup = g
	}
	if e, ok, err := body.limited("eventType", limits.EventType, ""); err != nil {
		return p, err
	} else if ok && e != "" {
		p.EventType = e
	}
	p.Names, err = traceNames(body["traceNames"])
	return p, err
}

func traceNames(raw json.RawMessage) ([]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		if err := limits.TraceName.CheckAs("traceNames", one); err != nil {
			return nil, err
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, bad("traceNames must be a string or an array of strings")
	}
	var out []string
	for i, n := range many {
		if err := limits.TraceName.CheckAs(fmt.Sprintf("traceNames[%d]", i), n); err != nil {
			return nil, err
		}
		if n != "" {
			out = append(out, n)
		}
	}
	return out, nil
}

// tracesOfMessage is GET /api/v1/traces/{partitionId}/{transactionId}.
func (s *Server) tracesOfMessage(w http.ResponseWriter, r *http.Request) {
	pid, txid, ok := messageKey(w, r)
	if !ok {
		return
	}
	pl, _, err := s.partitionPlane(r.Context(), tenantOf(r), pid)
	if err != nil {
		s.routeError(w, r, "cross_shard_partition", err)
		return
	}
	ts, err := pl.store.TracesOf(r.Context(), tenantOf(r), pid, txid)
	if err != nil {
		s.storeError(w, r, "traces", err)
		return
	}
	out := make([]traceWire, len(ts))
	for i, t := range ts {
		out[i] = newTraceWire(t)
	}
	writeJSON(w, http.StatusOK, tracesOfMessageAnswer{out})
}

// page reads limit (default def, at least 1, clamped to 1000) and offset
// (>= 0).
func page(w http.ResponseWriter, r *http.Request, def int) (int, int, bool) {
	q := r.URL.Query()
	limit, offset := queryInt(q, "limit", def), queryInt(q, "offset", 0)
	if limit < 1 {
		writeError(w, http.StatusBadRequest, "limit must be at least 1")
		return 0, 0, false
	}
	limit = min(limit, 1000)
	if offset < 0 {
		writeError(w, http.StatusBadRequest, "offset must not be negative")
		return 0, 0, false
	}
	return limit, offset, true
}

// tracesByName is GET /api/v1/traces/by-name/{traceName}.
func (s *Server) tracesByName(w http.ResponseWriter, r *http.Request) {
	limit, offset, ok := page(w, r, 100)
	if !ok {
		return
	}
	ts, total, ok := s.tracesByNameAcross(w, r, r.PathValue("traceName"), limit, offset)
	if !ok {
		return
	}
	out := make([]traceOfNameWire, len(ts))
	for i, t := range ts {
		out[i] = newTraceOfNameWire(t)
	}
	writeJSON(w, http.StatusOK, tracesByNameAnswer{out, total, tracePage{limit, offset}})
}

// traceNamesList is GET /api/v1/traces/names.
func (s *Server) traceNamesList(w http.ResponseWriter, r *http.Request) {
	limit, offset, ok := page(w, r, 50)
	if !ok {
		return
	}
	ns, total, ok := s.traceNamesAcross(w, r, limit, offset)
	if !ok {
		return
	}
	out := make([]traceNameWire, len(ns))
	for i, n := range ns {
		seen := msStamp(n.LastSeen)
		out[i] = traceNameWire{TraceNameSnake: n.Name, TraceCount: n.TraceCount, MessageCount: n.MessageCount,
			LastSeenSnake: seen, Name: n.Name, Count: n.TraceCount, LastSeen: seen}
	}
	writeJSON(w, http.StatusOK, traceNamesAnswer{out, out, total, tracePage{limit, offset}})
}
