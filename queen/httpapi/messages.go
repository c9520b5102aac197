package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/queen-go/queen/queen/ids"
	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store"
)

// Message routes (contract-admin.md section 3).

// modeBody names the consumption mode of a queue with or without its
// queue-mode group and with busGroups bus groups.
func modeBody(hasQueueMode bool, busGroups int) consumptionMode {
	t := "none"
	switch {
	case hasQueueMode && busGroups > 0:
		t = "hybrid"
	case hasQueueMode:
		t = "queue"
	case busGroups > 0:
		t = "bus"
	}
	return consumptionMode{HasQueueMode: hasQueueMode, BusGroupsCount: busGroups, Type: t}
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
	rows, hasQM, bus, ok := s.messagesAcross(w, r, f)
	if !ok {
		return
	}
	out := make([]messageRow, len(rows))
	for i, m := range rows {
		out[i] = newMessageRow(m)
	}
	writeJSON(w, http.StatusOK, messageList{Messages: out, Mode: modeBody(hasQM, bus), Total: len(out)})
}

// findLimit bounds GET /api/v1/messages/by-transaction: a transactionId is
// unique per partition only, so it may name a message in many partitions;
// the dashboard's search shows the newest findLimit.
const findLimit = 50

// findByTransaction is GET /api/v1/messages/by-transaction?transactionId=
// (&queue=, &limit= up to findLimit): the tenant's messages with that exact
// transactionId, newest first, one index probe per partition. A missing
// transactionId is 400; none found is 200 with an empty list.
func (s *Server) findByTransaction(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	txid := q.Get("transactionId")
	if txid == "" {
		writeError(w, http.StatusBadRequest, "transactionId is required")
		return
	}
	if err := errors.Join(limits.TransactionID.Check("", txid), limits.Queue.Check("", q.Get("queue"))); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit := queryInt(q, "limit", findLimit)
	if limit < 1 || limit > findLimit {
		limit = findLimit
	}
	rows, ok := s.findAcross(w, r, q.Get("queue"), txid, limit)
	if !ok {
		return
	}
	out := make([]messageRow, len(rows))
	for i, m := range rows {
		out[i] = newMessageRow(m)
	}
	writeJSON(w, http.StatusOK, messagesFound{TransactionID: txid, Messages: out, Limit: limit})
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
	pl, _, err := s.partitionPlane(r.Context(), tenantOf(r), pid)
	if err != nil {
		s.routeError(w, r, "cross_shard_partition", err)
		return
	}
	d, err := pl.store.GetMessage(r.Context(), tenantOf(r), pid, txid)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "Message not found")
		return
	}
	if err != nil {
		s.storeError(w, r, "message", err)
		return
	}
	writeJSON(w, http.StatusOK, newMessageDetail(d, s.cipher))
}

// deleteMessage is DELETE /api/v1/messages/{partitionId}/{transactionId}.
func (s *Server) deleteMessage(w http.ResponseWriter, r *http.Request) {
	pid, txid, ok := messageKey(w, r)
	if !ok {
		return
	}
	var deleted bool
	err := s.partitionRouted(r.Context(), tenantOf(r), pid, func(pl *plane, epoch int64) (err error) {
		deleted, err = pl.store.DeleteMessage(r.Context(), tenantOf(r), pid, txid, epoch)
		return err
	})
	if s.routedFailed(w, r, "cross_shard_partition", err) {
		return
	}
	if err != nil {
		s.storeError(w, r, "delete message", err)
		return
	}
	if !deleted {
		writeJSON(w, http.StatusNotFound, messageDeleted{PartitionID: pid, TransactionID: txid,
			Message: "Message not found", Error: "Message not found"})
		return
	}
	writeJSON(w, http.StatusOK, messageDeleted{Success: true, PartitionID: pid, TransactionID: txid,
		Message: "Message deleted successfully"})
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
		writeJSON(w, http.StatusServiceUnavailable, retryRefused{Error: "push maintenance is on: retry after it ends"})
		return
	}
	res, err := s.retryRouted(r.Context(), tenantOf(r), pid, txid)
	if errors.Is(err, store.ErrNotFound) {
		writeJSON(w, http.StatusNotFound, retryMissing{Error: "Message not found", PartitionID: pid, TransactionID: txid})
		return
	}
	if s.routedFailed(w, r, "cross_shard_partition", err) {
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
	writeJSON(w, http.StatusOK, retryDone{Success: true, Queue: res.Queue, Partition: res.Partition,
		OriginalTransactionID: txid, DLQRowRemoved: true,
		ReplayedAs: retryReplayed{MessageID: res.MessageID, TransactionID: res.TransactionID, QueueName: res.Queue, Status: status}})
}

// statusQueueMessages is GET /api/v1/status/queues/{queue}/messages: the
// messages list (GET /api/v1/messages, its filters and paging) of one
// queue, read on the queue's shard (messagesAcross routes a queue filter).
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
	writeJSON(w, http.StatusNotImplemented, migrationRefused{Error: migrationReason, Code: "not_implemented"})
}
