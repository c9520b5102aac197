package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/store"
)

// Message routes (contract-admin.md section 3).

func modeBody(hasQueueMode bool, busGroups int) map[string]any {
	t := "none"
	switch {
	case hasQueueMode && busGroups > 0:
		t = "hybrid"
	case hasQueueMode:
		t = "queue"
	case busGroups > 0:
		t = "bus"
	}
	return map[string]any{"hasQueueMode": hasQueueMode, "busGroupsCount": busGroups, "type": t}
}

func messageRowBody(m store.MessageRow) map[string]any {
	return map[string]any{"id": m.ID, "transactionId": m.TransactionID, "partitionId": m.PartitionID,
		"queuePath": m.Queue + "/" + m.Partition, "queue": m.Queue, "partition": m.Partition, "namespace": nullable(m.Namespace),
		"task": nullable(m.Task), "status": m.Status, "queueStatus": m.QueueStatus,
		"busStatus": map[string]any{"consumedBy": m.ConsumedBy, "totalGroups": m.TotalGroups},
		"traceId":   m.TraceID, "producerSub": m.ProducerSub, "queuePriority": m.Priority,
		"createdAt": msTime(&m.CreatedAt), "leaseExpiresAt": msTime(m.LeaseExpiresAt), "retryCount": m.RetryCount}
}

// listMessages is GET /api/v1/messages: newest first, within [from, to)
// (from defaults to an hour ago; to, rounded up to its minute, to now).
func (s *Server) listMessages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := s.clock.Now()
	f := store.MessageFilter{Tenant: tenantOf(r), Queue: q.Get("queue"), Partition: q.Get("partition"), Task: q.Get("task"),
		Namespace: q.Get("ns"), Status: q.Get("status"), From: now.Add(-time.Hour), To: now,
		Limit: queryInt(q, "limit", 200), Offset: queryInt(q, "offset", 0)}
	if f.Namespace == "" {
		f.Namespace = q.Get("namespace")
	}
	for name, dst := range map[string]*time.Time{"from": &f.From, "to": &f.To} {
		if v := q.Get(name); v != "" {
			t, err := parseInstant(v)
			if err != nil {
				writeError(w, http.StatusBadRequest, name+" must be an RFC 3339 instant")
				return
			}
			*dst = t
		}
	}
	if q.Get("to") != "" {
		f.To = f.To.Truncate(time.Minute).Add(time.Minute)
	} else {
		f.To = f.To.Add(time.Millisecond)
	}
	if f.Limit < 1 || f.Limit > s.cfg.MaxPopBatch {
		f.Limit = 200
	}
	f.Offset = max(f.Offset, 0)
	rows, err := s.store.ListMessages(r.Context(), f)
	if err != nil {
		s.storeError(w, r, "messages", err)
		return
	}
	hasQM, bus, err := s.store.ConsumptionMode(r.Context(), f.Tenant, f.Queue)
	if err != nil {
		s.storeError(w, r, "messages", err)
		return
	}
	out := make([]map[string]any, len(rows))
	for i, m := range rows {
		out[i] = messageRowBody(m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": out, "mode": modeBody(hasQM, bus), "total": len(out)})
}

// messageKey reads {partitionId}/{transactionId}; a partition id that is
// not a UUID is 400.
func messageKey(w http.ResponseWriter, r *http.Request) (string, string, bool) {
	pid := r.PathValue("partitionId")
	if !ids.Valid(pid) {
		writeError(w, http.StatusBadRequest, "partitionId must be a UUID")
		return "", "", false
	}
	return pid, r.PathValue("transactionId"), true
}

// getMessage is GET /api/v1/messages/{partitionId}/{transactionId}.
func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) {
	pid, txid, ok := messageKey(w, r)
	if !ok {
		return
	}
	d, err := s.store.GetMessage(r.Context(), tenantOf(r), pid, txid)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "Message not found")
		return
	}
	if err != nil {
		s.storeError(w, r, "message", err)
		return
	}
	body := messageRowBody(d.MessageRow)
	body["payload"], body["data"], body["isEncrypted"] = d.Payload, d.Payload, d.IsEncrypted
	body["errorMessage"], body["retryCount"] = d.ErrorMessage, d.DLQRetries
	body["queueConfig"] = map[string]any{"leaseTime": d.Config.LeaseTime, "retryLimit": d.Config.RetryLimit,
		"retryDelay": d.Config.RetryDelay, "ttl": d.Config.TTL, "priority": d.Config.Priority}
	hasQM, consumedBy, groups := false, 0, make([]map[string]any, len(d.Groups))
	for i, g := range d.Groups {
		if g.Name == store.QueueModeGroup {
			hasQM = true
		} else if g.Consumed {
			consumedBy++
		}
		groups[i] = map[string]any{"name": g.Name, "consumed": g.Consumed, "leaseExpiresAt": msTime(g.LeaseExpiresAt)}
	}
	mode := modeBody(hasQM, d.TotalGroups)
	mode["consumedByGroups"] = consumedBy
	body["mode"], body["consumerGroups"] = mode, groups
	writeJSON(w, http.StatusOK, body)
}

// deleteMessage is DELETE /api/v1/messages/{partitionId}/{transactionId}.
func (s *Server) deleteMessage(w http.ResponseWriter, r *http.Request) {
	pid, txid, ok := messageKey(w, r)
	if !ok {
		return
	}
	deleted, err := s.store.DeleteMessage(r.Context(), tenantOf(r), pid, txid)
	if err != nil {
		s.storeError(w, r, "delete message", err)
		return
	}
	if !deleted {
		writeJSON(w, http.StatusNotFound, map[string]any{"success": false, "partitionId": pid, "transactionId": txid,
			"message": "Message not found", "error": "Message not found"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "partitionId": pid, "transactionId": txid,
		"message": "Message deleted successfully"})
}

// retryMessage is POST /api/v1/messages/{partitionId}/{transactionId}/retry:
// a dead-lettered message is pushed again (transactionId dlq:<row id>) and
// its DLQ row removed, in one transaction.
func (s *Server) retryMessage(w http.ResponseWriter, r *http.Request) {
	pid, txid, ok := messageKey(w, r)
	if !ok {
		return
	}
	if s.maint.Push() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"success": false, "dlqRowRemoved": false,
			"error": "push maintenance is on: retry after it ends"})
		return
	}
	res, err := s.store.RetryMessage(r.Context(), tenantOf(r), pid, txid)
	if errors.Is(err, store.ErrNotFound) {
		writeJSON(w, http.StatusNotFound, map[string]any{"success": false, "error": "Message not found",
			"partitionId": pid, "transactionId": txid})
		return
	}
	if err != nil {
		s.storeError(w, r, "retry message", err)
		return
	}
	status := "queued"
	if res.Duplicate {
		status = "duplicate"
	} else {
		s.Notify(tenantOf(r), res.Queue, []string{res.PartitionID})
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "queue": res.Queue, "partition": res.Partition,
		"originalTransactionId": txid, "dlqRowRemoved": true,
		"replayedAs": map[string]any{"index": 0, "message_id": res.MessageID, "transaction_id": res.TransactionID,
			"queueName": res.Queue, "status": status}})
}

// statusQueueMessages is GET /api/v1/status/queues/{queue}/messages: the
// messages list (GET /api/v1/messages, its filters and paging) of one
// queue.
func (s *Server) statusQueueMessages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	q.Set("queue", r.PathValue("queue"))
	r2 := r.Clone(r.Context())
	r2.URL.RawQuery = q.Encode()
	s.listMessages(w, r2)
}

// migrationReason is why the /api/v1/migration/* routes answer 501.
const migrationReason = "not supported by this broker: Queen's migration routes copy its database to another PostgreSQL " +
	"from inside the broker (pg_dump and pg_restore); queen keeps no state outside PostgreSQL, so move it with " +
	"PostgreSQL's own tools (pg_dump | pg_restore, or a streaming standby promoted: SPEC \"PostgreSQL failover\") " +
	"and point the brokers at the new server"

// migrationUnsupported answers the /api/v1/migration/* routes: 501 with
// the reason, for every method Queen serves there.
func (s *Server) migrationUnsupported(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusNotImplemented, map[string]any{"error": migrationReason, "code": "not_implemented"})
}
