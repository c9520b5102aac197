package queen

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/queen-go/queen/queen/admission"
	"github.com/queen-go/queen/queen/background"
	"github.com/queen-go/queen/queen/canary"
	"github.com/queen-go/queen/queen/dbprobe"
	"github.com/queen-go/queen/queen/spool"
)

// With shards the spool is one lane per shard (design-shards.md, invariant
// 6): FILE_BUFFER_DIR/<shard>, each a spool.Spool with its own lock, health
// and Drainer. A push whose shard is unreachable goes to that shard's lane,
// by the same rules as without shards (the shard's push path owns them,
// asking the shard's own probe); a down shard's backlog holds back only its
// lane. Each lane's drain replays through the HTTP API's router, which
// resolves every batch's placement when it drains, not when it was spooled:
// a queue moved meanwhile lands on its new shard at the current epoch.

// openLanes opens one spool lane per shard under dir, each with a probe of
// its shard (the first shard's is the broker's own). holder names this
// broker in the lanes' locks. Only the first shard's lane tells the outage
// record, which follows the first shard as the probe does.
func (b *Broker) openLanes(arbiter *admission.Arbiter, dir, holder string) error {
	fs := b.opts.SpoolFS
	if fs == nil {
		fs = spool.OSFS{}
	}
	if err := refuseUnlaned(fs, dir); err != nil {
		return err
	}
	for i, p := range b.shards {
		p.probe = b.probe
		var onHealth func(bool)
		if i == 0 {
			onHealth = b.outages.Reachable
		} else {
			p.probe = dbprobe.New(dbprobe.Options{ConnConfig: p.pool.Config().ConnConfig, Timeout: b.cfg.DBConnectionTimeout,
				Clock: b.opts.Clock, Jitter: b.opts.Jitter})
		}
		sp, err := spool.Open(spool.Options{Dir: filepath.Join(dir, p.name), FS: b.opts.SpoolFS, Clock: b.opts.Clock,
			EventsPerFile: b.cfg.FileBufferEventsPerFile, Log: b.log.With("shard", p.name), Holder: holder + " shard=" + p.name,
			OnHealth: onHealth})
		if err != nil {
			return fmt.Errorf("FILE_BUFFER_DIR (shard %s's lane): %w", p.name, err)
		}
		p.spool = sp
		p.drainer = &spool.Drainer{Spool: sp, Arbiter: arbiter, Every: b.cfg.FileBufferFlush, MaxBatch: b.cfg.FileBufferMaxBatch,
			Ping: p.probe.Probe}
	}
	return nil
}

// refuseUnlaned refuses a FILE_BUFFER_DIR holding spool files of its own:
// a broker without shards spooled there, and its pushes, answered
// buffered, would never replay from a directory the lanes do not read.
func refuseUnlaned(fs spool.FS, dir string) error {
	names, err := fs.List(dir)
	if err != nil {
		return nil // none yet: the lanes create it
	}
	for _, name := range names {
		if strings.HasSuffix(name, ".buf") || strings.HasSuffix(name, ".tmp") {
			return fmt.Errorf("FILE_BUFFER_DIR: %s holds %s, spooled without shards; with shards the spool is a lane per shard under it: start once without shards to replay it", dir, filepath.Base(name))
		}
	}
	return nil
}

// routeLanes points every lane's drain at the HTTP API's replay, which
// routes each batch by its queue's placement at drain time.
func (b *Broker) routeLanes() {
	for _, p := range b.shards {
		if p.drainer == nil {
			continue
		}
		p.drainer.Replay = b.api.Replay
		if canary.On("drain-spooled-shard") {
			// The planted bug: the lane's own shard, unfenced, however
			// the queue moved since it was spooled.
			p.drainer.Replay = p.pushes.Replay
		}
	}
}

// laneDrainers are the lanes' drains, as background services.
func (b *Broker) laneDrainers() []background.Service {
	var out []background.Service
	for _, p := range b.shards {
		if p.drainer != nil {
			out = append(out, p.drainer)
		}
	}
	return out
}

// closeLanes finalizes every lane (Shutdown) or, abandon, leaves it as a
// killed process would (Crash, a failed Start); then closes the probes of
// the shards but the first (whose probe is the broker's own).
func (b *Broker) closeLanes(abandon bool) {
	for i, p := range b.shards {
		if p.spool != nil {
			if abandon {
				p.spool.Abandon()
			} else if err := p.spool.Close(); err != nil {
				b.log.Warn("spool: finalize at shutdown failed; the file is finalized at next start", "shard", p.name, "err", err)
			}
		}
		if i > 0 && p.probe != nil {
			p.probe.Close()
		}
	}
}

// Lane is shard's spool lane and its drain: nil without shards, without a
// spool or for a shard not configured.
func (b *Broker) Lane(shard string) (*spool.Spool, *spool.Drainer) {
	for _, p := range b.shards {
		if p.name == shard {
			return p.spool, p.drainer
		}
	}
	return nil, nil
}

// Spools are the broker's spool directories: its one spool without
// shards, each shard's lane with them; none without FILE_BUFFER_DIR.
func (b *Broker) Spools() []*spool.Spool {
	if b.spool != nil {
		return []*spool.Spool{b.spool}
	}
	var out []*spool.Spool
	for _, p := range b.shards {
		if p.spool != nil {
			out = append(out, p.spool)
		}
	}
	return out
}

// Drainers are the drains of Spools, in the same order.
func (b *Broker) Drainers() []*spool.Drainer {
	if b.drainer != nil {
		return []*spool.Drainer{b.drainer}
	}
	var out []*spool.Drainer
	for _, p := range b.shards {
		if p.drainer != nil {
			out = append(out, p.drainer)
		}
	}
	return out
}
