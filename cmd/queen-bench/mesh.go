package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/queen-go/queen/queen/pglocal"
)

// meshResult is what two brokers on one database give: push on A to a long
// poll on B with the mesh up and with every frame lost, and how long a
// maintenance flip on A takes to reach B's pops.
type meshResult struct {
	Up          latencyResult `json:"meshUp"`
	Dropped     latencyResult `json:"everyFrameDropped"`
	UpIdle      latencyResult `json:"meshUpAt20PerSecond"`
	DroppedIdle latencyResult `json:"everyFrameDroppedAt20PerSecond"`
	FloorMS     float64       `json:"periodicFloorMs"`
	Flips       int           `json:"flips"`
	FlipP50ms   float64       `json:"flipP50ms"`
	FlipMaxms   float64       `json:"flipMaxMs"`
	TargetFlip  float64       `json:"targetFlipMs"`
	DroppedMet  bool          `json:"droppedWithinFloor"`
	FlipMet     bool          `json:"flipMet"`
	Met         bool          `json:"met"`
	DroppedNote string        `json:"droppedNote"`
}

// meshPair starts two brokers pointed at each other's mesh port. With
// lost, each points at a port nobody listens on instead: the mesh runs, and
// every frame it sends is dropped.
func (e *env) meshPair(ctx context.Context, pg *pglocal.Cluster, dir, name string, lost bool) (a, b *env, stop func(), err error) {
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = pglocal.FreePort(); err != nil {
			return nil, nil, nil, err
		}
	}
	peer := func(i int) string {
		if lost {
			return "127.0.0.1:" + strconv.Itoa(ports[2])
		}
		return "127.0.0.1:" + strconv.Itoa(ports[1-i])
	}
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	var envs [2]*env
	for i := range envs {
		var s func()
		envs[i], s, err = startBroker(ctx, e.o, e.pool, pg, filepath.Join(dir, fmt.Sprintf("spool-%s-%d", name, i)),
			fmt.Sprintf("QUEEN_SERVER_ID=%s-%d", name, i), "QUEEN_MESH_PORT="+strconv.Itoa(ports[i]),
			"QUEEN_MESH_PEERS="+peer(i), "QUEEN_SYNC_SECRET=bench")
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		stops = append(stops, s)
	}
	// Let the links come up (or fail to) before measuring.
	time.Sleep(time.Second)
	return envs[0], envs[1], stop, nil
}

func (e *env) mesh(ctx context.Context, pg *pglocal.Cluster, dir string) (meshResult, error) {
	r := meshResult{FloorMS: 1000, TargetFlip: 100,
		DroppedNote: "long polls re-check the database every POP_WAIT_MAX_INTERVAL_MS (1000 ms) at worst"}
	a, b, stop, err := e.meshPair(ctx, pg, dir, "up", false)
	if err != nil {
		return r, err
	}
	r.Up, err = a.pushToPop(ctx, "bench-mesh-up", a.url, b, 10*time.Millisecond, 20)
	if err == nil {
		// At 20 msg/s the consumers are parked when a message comes:
		// what wakes them is the mesh, or their own re-check.
		r.UpIdle, err = a.pushToPop(ctx, "bench-mesh-up-idle", a.url, b, 500*time.Millisecond, 20)
	}
	if err == nil {
		err = r.flips(ctx, a, b)
	}
	stop()
	if err != nil {
		return r, err
	}
	a, b, stop, err = e.meshPair(ctx, pg, dir, "lost", true)
	if err != nil {
		return r, err
	}
	defer stop()
	if r.Dropped, err = a.pushToPop(ctx, "bench-mesh-lost", a.url, b, 10*time.Millisecond, r.FloorMS); err != nil {
		return r, err
	}
	if r.DroppedIdle, err = a.pushToPop(ctx, "bench-mesh-lost-idle", a.url, b, 500*time.Millisecond, r.FloorMS); err != nil {
		return r, err
	}
	r.DroppedMet = r.Dropped.Met && r.DroppedIdle.Met
	r.FlipMet = r.FlipMaxms < r.TargetFlip
	r.Met = r.Up.Met && r.UpIdle.Met && r.DroppedMet && r.FlipMet
	return r, nil
}

// flips turns pop maintenance on and off on a, ten times each way, and
// measures until b's pops answer accordingly (204 while on). A stock of
// messages keeps b's pops answering 200 while it is off.
func (r *meshResult) flips(ctx context.Context, a, b *env) error {
	const queue = "bench-mesh-flip"
	var items []byte
	for i := 0; i < 1000; i++ {
		if i > 0 {
			items = append(items, ',')
		}
		items = fmt.Appendf(items, `{"queue":%q,"transactionId":"flip-%d"}`, queue, i)
	}
	if code, body, err := a.http.do(ctx, "POST", a.url+"/api/v1/push", fmt.Appendf(nil, `{"items":[%s]}`, items)); err != nil || code != 201 {
		return fmt.Errorf("flip stock: %d %s %v", code, body, err)
	}
	ledger.addQueued(queue, 1000)
	var took []float64
	for i := 0; i < 20; i++ {
		on := i%2 == 0
		t0 := time.Now()
		if code, body, err := a.http.do(ctx, "POST", a.url+"/api/v1/system/maintenance/pop", fmt.Appendf(nil, `{"enabled":%t}`, on)); err != nil || code != 200 {
			return fmt.Errorf("flip: %d %s %v", code, body, err)
		}
		for {
			code, body, err := b.http.do(ctx, "GET", b.url+"/api/v1/pop/queue/"+queue+"?autoAck=true", nil)
			if err != nil || (code != 200 && code != 204) {
				return fmt.Errorf("pop during flip: %d %s %v", code, body, err)
			}
			if (code == 204) == on {
				break
			}
			if time.Since(t0) > 2*time.Minute {
				return fmt.Errorf("flip %d never reached the other broker", i)
			}
		}
		took = append(took, float64(time.Since(t0))/1e6)
	}
	r.Flips, r.FlipP50ms, r.FlipMaxms = len(took), percentile(took, 0.5), percentile(took, 1)
	return nil
}

func (r meshResult) print() {
	fmt.Printf("%-13s at 20 msg/s (consumers parked): mesh up p50 %.1f ms, p99 %.1f ms (target p99 < %.0f ms, %s); every frame lost p50 %.1f ms, p99 %.1f ms (floor %.0f ms, %s)\n",
		"mesh idle", r.UpIdle.P50ms, r.UpIdle.P99ms, r.UpIdle.TargetP99, metWord(r.UpIdle.Met), r.DroppedIdle.P50ms, r.DroppedIdle.P99ms,
		r.FloorMS, metWord(r.DroppedIdle.Met))
	fmt.Printf("%-13s push on A to long poll on B at %d msg/s: mesh up p50 %.1f ms, p99 %.1f ms (target p99 < %.0f ms, %s); every frame lost p50 %.1f ms, p99 %.1f ms (floor %.0f ms, %s); pop-maintenance flip on A seen by B's pops: p50 %.1f ms, max %.1f ms over %d flips (target < %.0f ms, %s)\n",
		"mesh", r.Up.Rate, r.Up.P50ms, r.Up.P99ms, r.Up.TargetP99, metWord(r.Up.Met), r.Dropped.P50ms, r.Dropped.P99ms, r.FloorMS,
		metWord(r.DroppedMet), r.FlipP50ms, r.FlipMaxms, r.Flips, r.TargetFlip, metWord(r.FlipMet))
}
