package httpapi

import (
	"net/http"
	"sort"
	"strconv"
	"time"
)

// Consumer-group routes, in the shapes Queen's CLI and clients read
// (contract-admin.md section 2).

// msStamp is a time in the admin rows' timestamp format.
func msStamp(t time.Time) string { return t.UTC().Format(adminTimeLayout) }

// msStampOrNull is msStamp for a time that may be missing: null then.
func msStampOrNull(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := msStamp(*t)
	return &s
}

// wireMode is a subscription's mode as Queen reports it: an "all" group
// has none (null).
func wireMode(m string) *string {
	switch m {
	case "", "all":
		return nil
	case "from":
		m = "timestamp"
	}
	return &m
}

// listGroups is GET /api/v1/consumer-groups: a top-level array.
func (s *Server) listGroups(w http.ResponseWriter, r *http.Request) {
	gs, err := s.listGroupsOf(r.Context(), tenantOf(r))
	if err != nil {
		s.fanError(w, r, "consumer groups", err)
		return
	}
	out := make([]consumerGroupRow, len(gs)) // never nil: no group is []
	for i, g := range gs {
		state := "Dead"
		switch {
		case g.MaxTimeLagSeconds > 300:
			state = "Lagging"
		case g.Consumed:
			state = "Stable"
		}
		out[i] = consumerGroupRow{Name: g.Group, QueueName: g.Queue, Topics: []string{g.Queue}, Members: g.Members,
			PartitionsWithLag: g.PartitionsWithLag, MaxTimeLag: g.MaxTimeLagSeconds,
			LagSeconds: g.MaxTimeLagSeconds, LagMessages: g.LagMessages, State: state,
			Queue: g.Queue, Partitions: g.Members, SubscriptionMode: wireMode(g.SubscriptionMode)}
		if out[i].SubscriptionMode != nil {
			out[i].SubscriptionTimestamp = msStampOrNull(g.SubscriptionTimestamp)
			out[i].SubscriptionCreatedAt = msStampOrNull(g.SubscriptionCreatedAt)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// laggingGroups is GET /api/v1/consumer-groups/lagging?minLagSeconds=N
// (3600): every (group, partition) whose oldest unconsumed message is older
// than N seconds, most lagging first.
func (s *Server) laggingGroups(w http.ResponseWriter, r *http.Request) {
	minLag := int64(3600)
	if v := r.URL.Query().Get("minLagSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "minLagSeconds must be a non-negative integer")
			return
		}
		minLag = n
	}
	all, err := s.groupPartitionsOf(r.Context(), tenantOf(r), nil)
	if err != nil {
		s.fanError(w, r, "lagging consumer groups", err)
		return
	}
	out := []laggingCursor{} // none lagging is [], not null
	for g, parts := range all {
		for _, p := range parts {
			if p.OldestUnconsumedAt == nil || p.TimeLagSeconds <= minLag {
				continue
			}
			out = append(out, laggingCursor{ConsumerGroup: g, QueueName: p.Queue, PartitionName: p.Partition,
				PartitionID: p.PartitionID, WorkerID: strPtr(p.WorkerID), OffsetLag: p.OffsetLag,
				TimeLagSeconds: p.TimeLagSeconds, LagHours: float64(p.TimeLagSeconds*100/3600) / 100,
				OldestUnconsumedAt: msStampOrNull(p.OldestUnconsumedAt), LastConsumedAt: msStampOrNull(p.LastConsumedAt),
				Name: g, Queue: p.Queue, LagSeconds: p.TimeLagSeconds, LagMessages: p.OffsetLag})
		}
	}
	sortByLag(out)
	writeJSON(w, http.StatusOK, out)
}

func sortByLag(rows []laggingCursor) {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].TimeLagSeconds > rows[j].TimeLagSeconds })
}

// getGroup is GET /api/v1/consumer-groups/{group}: its cursors by queue; an
// unknown group is {}.
func (s *Server) getGroup(w http.ResponseWriter, r *http.Request) {
	g := r.PathValue("group")
	all, err := s.groupPartitionsOf(r.Context(), tenantOf(r), &g)
	if err != nil {
		s.fanError(w, r, "consumer group", err)
		return
	}
	// Keyed by queue name: the keys are data, so this map stays a map.
	out := map[string]*groupQueueCursors{} // an unknown group is {}
	for _, p := range all[g] {
		if out[p.Queue] == nil {
			out[p.Queue] = &groupQueueCursors{}
		}
		out[p.Queue].Partitions = append(out[p.Queue].Partitions, groupCursor{Partition: p.Partition,
			WorkerID: strPtr(p.WorkerID), LastConsumedAt: msStampOrNull(p.LastConsumedAt),
			TotalConsumed: p.TotalConsumed, OffsetLag: p.OffsetLag, TimeLagSeconds: p.TimeLagSeconds,
			LeaseActive: p.LeaseActive})
	}
	writeJSON(w, http.StatusOK, out)
}

// queryFlag is queryBool with a default for an absent parameter.
func queryFlag(r *http.Request, name string, def bool) bool {
	if !r.URL.Query().Has(name) {
		return def
	}
	return queryBool(r.URL.Query(), name)
}

// deleteGroup is DELETE /api/v1/consumer-groups/{group}[/queues/{queue}]
// ?deleteMetadata= (default true).
func (s *Server) deleteGroup(w http.ResponseWriter, r *http.Request) {
	if err := pathLimits(r, groupPath); err != nil {
		writeBad(w, err)
		return
	}
	g := r.PathValue("group")
	var queue *string
	if q := r.PathValue("queue"); q != "" {
		queue = &q
	}
	meta := queryFlag(r, "deleteMetadata", true)
	n, queues, err := s.deleteGroupOn(r.Context(), tenantOf(r), g, queue, meta)
	if err != nil {
		s.fanError(w, r, "delete consumer group", err)
		return
	}
	for _, q := range queues {
		s.peers.QueueChanged(tenantOf(r), q, false) // peers forget the group's cached subscription
	}
	writeJSON(w, http.StatusOK, groupDeleted{Success: true, ConsumerGroup: g, DeletedPartitions: n,
		MetadataDeleted: meta, QueueName: queue})
}

// seekGroup is POST /api/v1/consumer-groups/{group}/queues/{queue}/seek
// with {"toEnd": true} or {"timestamp": RFC 3339}.
func (s *Server) seekGroup(w http.ResponseWriter, r *http.Request) {
	if err := pathLimits(r, groupPath); err != nil {
		writeBad(w, err)
		return
	}
	body, err := readObject(r, false)
	if err != nil {
		writeBad(w, err)
		return
	}
	toEnd, _, err := body.boolean("toEnd", "")
	if err != nil {
		writeBad(w, err)
		return
	}
	ts, hasTS, err := body.str("timestamp", "")
	if err != nil {
		writeBad(w, err)
		return
	}
	var at *time.Time
	switch {
	case toEnd:
	case hasTS && ts != "":
		t, err := parseInstant(ts)
		if err != nil {
			writeError(w, http.StatusBadRequest, "timestamp must be an RFC 3339 instant: "+err.Error())
			return
		}
		at = &t
	default:
		writeError(w, http.StatusBadRequest, "Must specify either 'toEnd': true or 'timestamp'")
		return
	}
	g, q := r.PathValue("group"), r.PathValue("queue")
	pl, err := s.planeFor(r.Context(), tenantOf(r), "", q, false)
	if err != nil {
		s.placementFailed(w, r, err)
		return
	}
	n, _, err := pl.store.Seek(r.Context(), tenantOf(r), g, q, nil, toEnd, at)
	if !toEnd {
		// A seek to a timestamp deleted the group's watermark on the
		// queue (store.Seek) before it moved the cursors.
		pl.consumer.ForgetWatermarks(tenantOf(r), q, g)
	}
	if err != nil {
		s.storeError(w, r, "seek", err)
		return
	}
	writeJSON(w, http.StatusOK, groupSeeked{Success: true, ConsumerGroup: g, QueueName: q, SeekToEnd: toEnd,
		TargetTimestamp: msStampOrNull(at), PartitionsUpdated: n})
}

// seekPartition is POST .../partitions/{partition}/seek: always to the end
// (an empty body, {} or {"toEnd": true}).
func (s *Server) seekPartition(w http.ResponseWriter, r *http.Request) {
	if err := pathLimits(r, groupPath); err != nil {
		writeBad(w, err)
		return
	}
	if _, err := readObject(r, true); err != nil {
		writeBad(w, err)
		return
	}
	g, q, p := r.PathValue("group"), r.PathValue("queue"), r.PathValue("partition")
	pl, err := s.planeFor(r.Context(), tenantOf(r), "", q, false)
	if err != nil {
		s.placementFailed(w, r, err)
		return
	}
	ok, err := pl.store.PartitionExists(r.Context(), tenantOf(r), q, p)
	if err != nil {
		s.storeError(w, r, "seek", err)
		return
	}
	if !ok {
		writeJSON(w, http.StatusNotFound, failureAnswer{Success: false, Error: "Partition not found"})
		return
	}
	n, at, err := pl.store.Seek(r.Context(), tenantOf(r), g, q, &p, true, nil)
	if err != nil {
		s.storeError(w, r, "seek", err)
		return
	}
	writeJSON(w, http.StatusOK, partitionSeeked{Success: true, ConsumerGroup: g, QueueName: q, PartitionName: p,
		Updated: n > 0, CursorMovedTo: msStampOrNull(at)})
}

// setSubscription is POST /api/v1/consumer-groups/{group}/subscription
// with {"subscriptionTimestamp": RFC 3339}.
func (s *Server) setSubscription(w http.ResponseWriter, r *http.Request) {
	if err := pathLimits(r, groupPath); err != nil {
		writeBad(w, err)
		return
	}
	body, err := readObject(r, false)
	if err != nil {
		writeBad(w, err)
		return
	}
	v, ok, err := body.str("subscriptionTimestamp", "")
	if err != nil || !ok || v == "" {
		writeError(w, http.StatusBadRequest, "Missing subscriptionTimestamp in request body")
		return
	}
	at, err := parseInstant(v)
	if err != nil {
		writeError(w, http.StatusBadRequest, "subscriptionTimestamp must be an RFC 3339 instant: "+err.Error())
		return
	}
	g := r.PathValue("group")
	n, err := s.setSubscriptionOn(r.Context(), tenantOf(r), g, at)
	if err != nil {
		s.fanError(w, r, "subscription", err)
		return
	}
	writeJSON(w, http.StatusOK, subscriptionSet{Success: true, ConsumerGroup: g, NewTimestamp: v, RowsUpdated: n})
}

// refreshStats is POST /api/v1/stats/refresh: every figure here is
// computed from the rows when asked, so there is nothing to refresh.
func (s *Server) refreshStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, statsRefreshed{Skipped: false, Live: true,
		Message: "statistics are computed from the rows on every read; nothing to refresh"})
}
