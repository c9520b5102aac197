package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store"
)

// intOptions and boolOptions are the configure options and the patch field
// each one sets.
func optionFields(p *store.OptionPatch) (map[string]**int, map[string]**bool) {
	return map[string]**int{
			"priority": &p.Priority, "leaseTime": &p.LeaseTime, "retryLimit": &p.RetryLimit,
			"retryDelay": &p.RetryDelay, "maxSize": &p.MaxSize, "ttl": &p.TTL,
			"delayedProcessing": &p.DelayedProcessing, "windowBuffer": &p.WindowBuffer,
			"retentionSeconds": &p.RetentionSeconds, "completedRetentionSeconds": &p.CompletedRetentionSeconds,
			"maxWaitTimeSeconds": &p.MaxWaitTimeSeconds,
		}, map[string]**bool{
			"deadLetterQueue": &p.DeadLetterQueue, "dlqAfterMaxRetries": &p.DLQAfterMaxRetries,
			"retentionEnabled": &p.RetentionEnabled, "encryptionEnabled": &p.EncryptionEnabled,
		}
}

func parseOptions(o obj, path string) (store.OptionPatch, error) {
	var p store.OptionPatch
	ints, bools := optionFields(&p)
	for name, dst := range ints {
		v, ok, err := o.integer(name, path)
		if err != nil {
			return p, err
		}
		if ok {
			// priority may be negative (it only orders); the rest are
			// durations, counts and sizes.
			if v < 0 && name != "priority" {
				return p, bad("%s%s must not be negative", path, name)
			}
			*dst = &v
		}
	}
	for name, dst := range bools {
		v, ok, err := o.boolean(name, path)
		if err != nil {
			return p, err
		}
		if ok {
			*dst = &v
		}
	}
	if p.LeaseTime != nil && *p.LeaseTime == 0 {
		return p, bad("%sleaseTime must be positive", path)
	}
	return p, nil
}

func (s *Server) configure(w http.ResponseWriter, r *http.Request) {
	in, bad := s.configureInput(r)
	if bad != nil {
		bad(w)
		return
	}
	pl, err := s.planeFor(r.Context(), in.Tenant, deref(in.Namespace), in.Queue, true)
	if err != nil {
		s.placementFailed(w, r, err)
		return
	}
	res, err := pl.names.Configure(r.Context(), in)
	if err != nil {
		s.storeError(w, r, "configure", err)
		return
	}
	s.peers.QueueChanged(in.Tenant, res.Queue.Name, false)
	writeJSON(w, http.StatusOK, configureAnswer{
		Configured: true, QueueID: res.Queue.ID, PartitionID: res.DefaultPartitionID,
		Queue: res.Queue.Name, Namespace: strPtr(res.Queue.Namespace), Task: strPtr(res.Queue.Task),
		Options: res.Queue.Options,
	})
}

// configureInput reads a configure body; bad, when set, writes the 400
// naming what is wrong (nothing has been written).
func (s *Server) configureInput(r *http.Request) (store.ConfigureInput, func(http.ResponseWriter)) {
	badErr := func(err error) func(http.ResponseWriter) { return func(w http.ResponseWriter) { writeBad(w, err) } }
	badMsg := func(msg string) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) { writeError(w, http.StatusBadRequest, msg) }
	}
	in := store.ConfigureInput{Tenant: tenantOf(r)}
	body, err := readObject(r, false)
	if err != nil {
		return in, badErr(err)
	}
	q, ok, err := body.limited("queue", limits.Queue, "")
	if err != nil {
		return in, badErr(err)
	}
	// An empty name is a name: Queen creates a queue called "" (the JS
	// client can ask for it); only a missing or non-string queue is 400.
	if !ok {
		return in, badMsg("queue is required")
	}
	in.Queue = q
	for _, f := range []struct {
		field limits.Field
		dst   **string
	}{{limits.Namespace, &in.Namespace}, {limits.Task, &in.Task}} {
		v, ok, err := body.limited(f.field.Name, f.field, "")
		if err != nil {
			return in, badErr(err)
		}
		if ok {
			*f.dst = &v
		}
	}
	mode, _, err := body.str("mode", "")
	if err != nil {
		return in, badErr(err)
	}
	switch mode {
	case "", "merge":
	case "replace":
		in.Replace = true
	default:
		return in, badMsg(`mode must be "merge" or "replace"`)
	}
	// Options may be nested under "options" or given at the top level.
	opts, ok, err := body.object("options", "")
	if err != nil {
		return in, badErr(err)
	}
	path := "options."
	if !ok {
		opts, path = body, ""
	}
	if in.Patch, err = parseOptions(opts, path); err != nil {
		return in, badErr(err)
	}
	if e := in.Patch.EncryptionEnabled; e != nil && *e && s.cipher == nil {
		return in, badMsg(path + "encryptionEnabled needs QUEEN_ENCRYPTION_KEY (64 hex characters) " +
			"set on every broker: without it payloads would be stored in the clear")
	}
	return in, nil
}

// listQueues is GET /api/v1/resources/queues?namespace&task&limit&offset:
// newest first, every queue when limit is absent (as Queen's broker
// answers), a page when it is given.
func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) {
	f, ok := queueFilter(w, r, 0)
	if !ok {
		return
	}
	qs, err := s.queuePage(r.Context(), tenantOf(r), f)
	if err != nil {
		s.fanError(w, r, "list queues", err)
		return
	}
	out := make([]queueResource, len(qs)) // never nil: no queue is []
	for i, q := range qs {
		out[i] = newQueueResource(q)
	}
	writeJSON(w, http.StatusOK, queueList{Queues: out, Total: len(out)})
}

// queueFilter reads namespace, task, queue, limit (default def, 0: all) and
// offset; a limit or offset that is not a non-negative integer is a 400
// naming it.
func queueFilter(w http.ResponseWriter, r *http.Request, def int) (store.QueueFilter, bool) {
	q := r.URL.Query()
	f := store.QueueFilter{Namespace: q.Get("namespace"), Task: q.Get("task"), Name: q.Get("queue"), Limit: def}
	for _, p := range []struct {
		name string
		to   *int
	}{{"limit", &f.Limit}, {"offset", &f.Offset}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				writeError(w, http.StatusBadRequest, p.name+" must be a non-negative integer")
				return f, false
			}
			*p.to = n
		}
	}
	return f, true
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) {
	pl, err := s.planeFor(r.Context(), tenantOf(r), "", r.PathValue("queue"), false)
	if err != nil {
		s.placementFailed(w, r, err)
		return
	}
	q, err := pl.store.GetQueue(r.Context(), tenantOf(r), r.PathValue("queue"))
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "Queue not found")
		return
	}
	if err != nil {
		s.storeError(w, r, "get queue", err)
		return
	}
	writeJSON(w, http.StatusOK, newQueueResourceDetail(q))
}

// queueDepth is GET /api/v1/resources/queues/{queue}/depth?group=: each
// partition's backlog for the group, or for the queue as a whole without
// one, from sequence arithmetic (cheap enough to poll). There is no
// conflation here, so the effective figures are the plain ones.
func (s *Server) queueDepth(w http.ResponseWriter, r *http.Request) {
	group := r.URL.Query().Get("group")
	pl, err := s.planeFor(r.Context(), tenantOf(r), "", r.PathValue("queue"), false)
	if err != nil {
		s.placementFailed(w, r, err)
		return
	}
	b, err := pl.store.Backlog(r.Context(), tenantOf(r), r.PathValue("queue"), group)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "Queue not found")
		return
	}
	if err != nil {
		s.storeError(w, r, "queue depth", err)
		return
	}
	a := queueDepthAnswer{Queue: b.Queue, Group: strPtr(group), Partitions: make([]partitionDepth, len(b.Partitions))}
	for i, p := range b.Partitions {
		a.Pending, a.Processing, a.Ready = a.Pending+p.Pending, a.Processing+p.Processing, a.Ready+p.Ready
		if p.Pending > 0 {
			a.PartitionsPending++
		}
		if p.Ready > 0 {
			a.PartitionsReady++
		}
		a.Partitions[i] = partitionDepth{Partition: p.Partition, Pending: p.Pending, Processing: p.Processing, Ready: p.Ready}
	}
	a.EffectivePending, a.EffectiveReady = a.Pending, a.Ready
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) deleteQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("queue")
	pl, err := s.planeFor(r.Context(), tenantOf(r), "", name, false)
	if err != nil {
		s.placementFailed(w, r, err)
		return
	}
	existed, err := pl.names.DeleteQueue(r.Context(), tenantOf(r), name)
	pl.consumer.ForgetWatermarks(tenantOf(r), name, "") // the delete took the queue's watermarks
	if err != nil {
		s.storeError(w, r, "delete queue", err)
		return
	}
	if existed {
		s.peers.QueueChanged(tenantOf(r), name, true)
	}
	s.queueMessages.forget(tenantOf(r), name)
	body := queueDeleted{Deleted: existed, Queue: name, Existed: existed}
	if !existed {
		body.Message = "Queue not found, nothing was deleted"
	}
	writeJSON(w, http.StatusOK, body)
}

// overview is GET /api/v1/resources/overview (contract-admin.md 4.6).
// Lag is in seconds (time) and messages (offset) over every cursor with
// messages past it; throughput is the recorded minutes' (recentThroughput).
func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	o, err := s.overviewOf(r.Context(), tenantOf(r))
	if err != nil {
		s.fanError(w, r, "overview", err)
		return
	}
	tp, err := s.recentThroughput(r)
	if err != nil {
		s.fanError(w, r, "overview", err)
		return
	}
	writeJSON(w, http.StatusOK, overviewAnswer{Throughput: tp,
		Queues: o.Queues, Partitions: o.Partitions,
		Namespaces: len(o.Namespaces), Tasks: len(o.Tasks),
		NamespaceNames: emptyIfNil(o.Namespaces), TaskNames: emptyIfNil(o.Tasks),
		Messages: stateCounts{Total: o.Messages, Pending: o.Pending, Processing: o.Processing,
			Completed: completedOf(o.Messages, o.Pending, o.QueueDLQ), DeadLetter: o.DLQ},
		Lag:          overviewLag{Time: newLagSpread(o.LagSeconds), Offset: newLagSpread(o.LagOffset)},
		ActiveLeases: o.ActiveLeases, Timestamp: s.clock.Now().UTC().Format(adminTimeLayout),
	})
}

// throughputMinutes is how many closed minutes "throughput now" averages:
// enough to smooth one quiet minute, short enough to follow a change.
const throughputMinutes = 5

// recentThroughput is the tenant's messages pushed and completed per
// second over the last throughputMinutes closed minutes, as recorded
// (the open minute is written only when it closes). With analytics off
// nothing is recorded and it is zero.
func (s *Server) recentThroughput(r *http.Request) (overviewThroughput, error) {
	to := s.clock.Now().UTC().Truncate(time.Minute)
	from := to.Add(-throughputMinutes * time.Minute)
	buckets, err := s.queueBucketsOf(r.Context(), store.StatsFilter{Tenant: tenantOf(r), From: from, To: to, BucketMinutes: 1})
	if err != nil {
		return overviewThroughput{}, err
	}
	var sum store.QueueBucket
	for _, b := range buckets {
		sum = sumQueueBuckets(sum, b)
	}
	secs := float64(throughputMinutes * 60)
	return overviewThroughput{IngestedPerSecond: float64(sum.PushMessages) / secs,
		ProcessedPerSecond: float64(completed(sum)) / secs}, nil
}

func emptyIfNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (s *Server) listDLQ(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.DLQFilter{Tenant: tenantOf(r), Queue: q.Get("queue"), Group: q.Get("consumerGroup"), Partition: q.Get("partition"),
		Limit: queryInt(q, "limit", 100), Offset: queryInt(q, "offset", 0)}
	// Queen's brokers ignore partition, from and to; honouring them keeps
	// a filtered drain (queenctl dlq drain --partition/--from/--to) from
	// deleting rows outside the filter.
	for _, b := range []struct {
		name string
		dst  **time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if v := q.Get(b.name); v != "" {
			t, err := parseInstant(v)
			if err != nil {
				writeError(w, http.StatusBadRequest, b.name+": "+err.Error())
				return
			}
			*b.dst = &t
		}
	}
	if f.Limit < 1 {
		writeError(w, http.StatusBadRequest, "limit must be at least 1")
		return
	}
	f.Limit = min(f.Limit, 10000) // clamped, not refused: pagination.limit says what was used
	if f.Offset < 0 {
		writeError(w, http.StatusBadRequest, "offset must not be negative")
		return
	}
	entries, total, ok := s.dlqAcross(w, r, f)
	if !ok {
		return
	}
	msgs := make([]dlqMessage, len(entries)) // never nil: an empty page is []
	for i, e := range entries {
		msgs[i] = newDLQMessage(e, s.cipher)
	}
	writeJSON(w, http.StatusOK, dlqPage{Messages: msgs, Total: total,
		Pagination: dlqPagination{Limit: f.Limit, Offset: f.Offset, Total: total}})
}
