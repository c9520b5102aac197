package httpapi

import (
	"cmp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/queen-go/queen/queen/store"
)

// Overflow is the tenant and queue label of every per-queue series past
// QUEEN_METRICS_MAX_QUEUES: queue names are chosen by clients (a push
// creates its queue), so the label sets must not grow with them.
const Overflow = "_overflow"

// queueSeries is queen_queue_messages_total{tenant,queue,op}, with at most
// max (tenant, queue) label pairs; later pairs count under Overflow. A
// deleted queue's series are deleted, and its place freed.
type queueSeries struct {
	vec *prometheus.CounterVec
	max int

	mu    sync.Mutex
	known map[[2]string]bool
}

func newQueueSeries(max int) *queueSeries {
	if max <= 0 {
		max = 1000
	}
	return &queueSeries{max: max, known: map[[2]string]bool{},
		vec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "queen_queue_messages_total",
			Help: "Messages pushed (queued) and popped through this broker, per queue (at most QUEEN_METRICS_MAX_QUEUES queues; the rest under tenant and queue \"_overflow\")."},
			[]string{"tenant", "queue", "op"})}
}

// add counts n messages of op on a queue.
func (q *queueSeries) add(tenant, queue, op string, n int) {
	k := [2]string{tenant, queue}
	q.mu.Lock()
	if !q.known[k] {
		if len(q.known) >= q.max {
			k = [2]string{Overflow, Overflow}
		} else {
			q.known[k] = true
		}
	}
	q.mu.Unlock()
	q.vec.WithLabelValues(k[0], k[1], op).Add(float64(n))
}

// forget deletes a queue's series (the queue was deleted).
func (q *queueSeries) forget(tenant, queue string) {
	q.mu.Lock()
	delete(q.known, [2]string{tenant, queue})
	q.mu.Unlock()
	q.vec.DeletePartialMatch(prometheus.Labels{"tenant": tenant, "queue": queue})
}

// ForgetQueueSeries drops this broker's series of a queue deleted through
// another broker (the mesh's QUEUE_CONFIG_DELETE).
func (s *Server) ForgetQueueSeries(tenant, queue string) { s.queueMessages.forget(tenant, queue) }

// capDepths keeps the max deepest queues' rows and sums the rest into one
// Overflow row, so a scrape's per-queue families stay bounded too.
func capDepths(rows []store.QueueDepth, max int) []store.QueueDepth {
	if len(rows) <= max {
		return rows
	}
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b store.QueueDepth) int { return cmp.Compare(b.Depth, a.Depth) })
	rest := store.QueueDepth{Tenant: Overflow, Queue: Overflow}
	for _, r := range rows[max:] {
		rest.Depth += r.Depth
		rest.DLQ += r.DLQ
	}
	return append(rows[:max:max], rest)
}

// tenantOnly gathers g without the series labelled with another tenant
// than tenant: what a tenant's own token scrapes.
func tenantOnly(g prometheus.Gatherer, tenant string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		fams, err := g.Gather()
		for _, f := range fams {
			f.Metric = slices.DeleteFunc(f.Metric, func(m *dto.Metric) bool {
				for _, l := range m.GetLabel() {
					if l.GetName() == "tenant" && l.GetValue() != tenant {
						return true
					}
				}
				return false
			})
		}
		return slices.DeleteFunc(fams, func(f *dto.MetricFamily) bool { return len(f.Metric) == 0 }), err
	})
}
