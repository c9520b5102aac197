package sim

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen/spool"
)

// FSecondSpool is the fault event of one second open of a running
// broker's spool directory (spool.second): Status "refused" (the lock is
// held: as it must be), "opened" (two spools on one directory) or "failed"
// (another error, in Err).
const FSecondSpool = "spool.second-open"

// lockedFS is a broker's spool filesystem in the simulator: the fault FS
// with the directory lock the real one takes (flock on dir/LOCK), so a
// second open of a running broker's directory meets what it would in
// production. A crash releases it (Broker.Crash abandons the spool), as
// the kernel does for a killed process.
type lockedFS struct{ *faults.FaultyFS }

// Lock implements spool.Locker.
func (lockedFS) Lock(dir, holder string) (io.Closer, error) { return spool.OSFS{}.Lock(dir, holder) }

// secondSpool (spool.second) opens the spool directory of each running
// broker of f a second time, as a second broker given the same
// FILE_BUFFER_DIR would before anything else: it must be refused while the
// broker runs. Were it opened, it would finalize the running broker's
// active file under it (Open's recovery), and the drain would replay and
// delete a file still being appended to; the opened spool is closed again
// at once.
func (r *runner) secondSpool(f FaultAt) {
	for _, b := range r.brokersOf(f) {
		if r.cluster.Broker(b) == nil || r.cluster.Broker(b).Spool() == nil {
			r.starved = append(r.starved, fmt.Sprintf("spool.second at=%v broker=%d: the broker was not up", f.At, b))
			continue
		}
		e := Event{Kind: KFault, Fault: FSecondSpool, Broker: b, VT: r.vt()}
		sp, err := spool.Open(spool.Options{Dir: r.cluster.nodes[b].spoolDir, FS: spool.OSFS{}, EventsPerFile: 20,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Holder: "serverId=sim-second"})
		switch {
		case err == nil:
			e.Status = "opened"
			_ = sp.Close()
		case errors.Is(err, spool.ErrLocked):
			// The refusal names the holder (pid, start time): not
			// recorded, so a replay's history is the same.
			e.Status = "refused"
		default:
			e.Status, e.Err = "failed", err.Error()
		}
		r.fired["spool.second"]++
		r.hist.Add(e)
	}
}
