package queen

import (
	"encoding/json"
	"log/slog"
	"sync/atomic"

	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/maintenance"
	"github.com/queen-go/queen/queen/mesh"
	"github.com/queen-go/queen/queen/names"
	"github.com/queen-go/queen/queen/waker"
)

// hints joins the mesh to the broker's parts. Outbound, it is the HTTP
// API's Peers and the maintenance switches' announcer; inbound, it turns
// frames into local wakes, cache forgets and switch flips. The default
// tenant travels as no tenant at all.
type hints struct {
	mesh  *mesh.Mesh
	wake  *waker.Hub
	names *names.Names
	// more are the other shards' name caches (none without shards).
	more  []*names.Names
	maint *maintenance.State
	log   *slog.Logger
	// forgetSeries drops the HTTP API's series of a deleted queue; set
	// once the API exists (frames may arrive before).
	forgetSeries atomic.Pointer[func(tenant, queue string)]
}

func wireTenant(t string) string {
	if t == config.DefaultTenant {
		return ""
	}
	return t
}

func localTenant(t string) string {
	if t == "" {
		return config.DefaultTenant
	}
	return t
}

// MessageAvailable implements httpapi.Peers.
func (h *hints) MessageAvailable(tenant, queue string, partitionIDs []string) {
	items := make([]mesh.Item, len(partitionIDs))
	for i, p := range partitionIDs {
		items[i] = mesh.Item{Tenant: wireTenant(tenant), Queue: queue, Partition: p}
	}
	h.mesh.Broadcast(mesh.MessageAvailableBatch, mesh.Items{Items: items})
}

// QueueChanged implements httpapi.Peers.
func (h *hints) QueueChanged(tenant, queue string, deleted bool) {
	t := mesh.QueueConfigSet
	if deleted {
		t = mesh.QueueConfigDelete
	}
	h.mesh.Broadcast(t, mesh.QueueRef{Tenant: wireTenant(tenant), Queue: queue})
}

// announce tells the peers of a maintenance flip whose row committed.
func (h *hints) announce(pop, on bool) {
	t := mesh.MaintenanceModeSet
	if pop {
		t = mesh.PopMaintenanceModeSet
	}
	h.mesh.Broadcast(t, mesh.Switch{Enabled: on})
}

// handle applies one frame from a peer. A frame that does not parse is
// logged and ignored: hints never fail anything.
func (h *hints) handle(from string, f mesh.Frame) {
	switch f.Type {
	case mesh.MessageAvailable:
		var it mesh.Item
		if h.decode(from, f, &it) {
			h.wakeItems([]mesh.Item{it})
		}
	case mesh.MessageAvailableBatch, mesh.HotlistDirtyBatch:
		// There is no hot-list here: pops find candidates in SQL, so a
		// partition that went from empty to pending is just a wake.
		var its mesh.Items
		if h.decode(from, f, &its) {
			h.wakeItems(its.Items)
		}
	case mesh.QueueConfigSet, mesh.QueueConfigDelete:
		var q mesh.QueueRef
		if h.decode(from, f, &q) {
			h.names.ForgetQueue(localTenant(q.Tenant), q.Queue)
			for _, n := range h.more {
				n.ForgetQueue(localTenant(q.Tenant), q.Queue)
			}
			if fs := h.forgetSeries.Load(); fs != nil && f.Type == mesh.QueueConfigDelete {
				(*fs)(localTenant(q.Tenant), q.Queue)
			}
		}
	case mesh.MaintenanceModeSet, mesh.PopMaintenanceModeSet:
		var s mesh.Switch
		if h.decode(from, f, &s) {
			h.maint.Apply(f.Type == mesh.PopMaintenanceModeSet, s.Enabled)
		}
	}
}

// wakeItems wakes, per queue, one parked pop per partition named, and the
// tenant-wide discovery pops.
func (h *hints) wakeItems(items []mesh.Item) {
	parts := map[string]map[string]bool{}
	perTenant := map[string]int{}
	for _, it := range items {
		k := waker.Key(localTenant(it.Tenant), it.Queue)
		if parts[k] == nil {
			parts[k] = map[string]bool{}
		}
		parts[k][it.Partition] = true
		perTenant[localTenant(it.Tenant)]++
	}
	for k, ps := range parts {
		h.wake.Notify(k, len(ps))
	}
	for t, n := range perTenant {
		h.wake.Notify(waker.Key(t, ""), n)
	}
}

func (h *hints) decode(from string, f mesh.Frame, v any) bool {
	if err := json.Unmarshal(f.Payload, v); err != nil {
		h.log.Warn("mesh: ignoring a frame that does not parse", "from", from, "type", f.Type, "err", err)
		return false
	}
	return true
}
