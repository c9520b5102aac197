package dbprobe_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/faults"
	"github.com/queen-go/queen/queen/clock"
	"github.com/queen-go/queen/queen/dbprobe"
	"github.com/queen-go/queen/queen/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// behindProxy is a connection config whose path to PostgreSQL a test can
// slow down or cut.
func behindProxy(t *testing.T) (*pgx.ConnConfig, *faults.PGProxy) {
	t.Helper()
	cc, err := pgx.ParseConfig(storetest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faults.NewPGProxy(fmt.Sprintf("%s:%d", cc.Host, cc.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	cc.Host, cc.Port = "127.0.0.1", uint16(proxy.Port())
	return cc, proxy
}

// Connecting takes longer than the configured timeout (a loaded server):
// with a fixed timeout every attempt fails forever. The probe doubles its
// timeout after each attempt that timed out, gets through, and the pool,
// which reads the probe's timeout before connecting, gets through too.
func TestProbeClimbsOutOfSlowConnects(t *testing.T) {
	cc, proxy := behindProxy(t)
	proxy.SetSlowConnect(1500 * time.Millisecond) // thirty times the configured timeout
	c := clock.NewSim(time.Unix(1000, 0))
	p := dbprobe.New(dbprobe.Options{ConnConfig: cc, Timeout: 50 * time.Millisecond, MaxTimeout: 10 * time.Second,
		Clock: c, Jitter: func() float64 { return 0.5 }})
	defer p.Close()
	ctx := context.Background()
	var err error
	tries := 0
	for tries = 1; tries <= 10; tries++ {
		if err = p.Probe(ctx); err == nil {
			break
		}
		c.Advance(dbprobe.MaxBackoff)
	}
	if err != nil {
		t.Fatalf("the probe never got through: %v (connect timeout now %v)", err, p.ConnectTimeout())
	}
	if tries == 1 || p.ConnectTimeout() <= 50*time.Millisecond {
		t.Fatalf("connected at try %d with timeout %v: the delay did not make the configured timeout too short", tries, p.ConnectTimeout())
	}
	t.Logf("connected at try %d; connect timeout now %v", tries, p.ConnectTimeout())

	pc, err := pgxpool.ParseConfig(storetest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig = cc.Copy()
	pc.ConnConfig.ConnectTimeout = 50 * time.Millisecond
	pc.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.ConnectTimeout = p.ConnectTimeout()
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("the pool still cannot connect: %v", err)
	}
	// Once connecting is fast again the timeout comes back down (from 3 s
	// to twice a fast connect: far below, even on a loaded machine).
	raised := p.ConnectTimeout()
	proxy.SetSlowConnect(0)
	proxy.Reset()
	// The probe's query is bounded by its connect timeout, now back near
	// the configured 50 ms: on a loaded machine one query can outlast it
	// (make test beside make sim failed here once), so a few tries.
	for try := 0; ; try++ {
		err := p.Probe(ctx)
		if err == nil {
			break
		}
		if try == 4 {
			t.Fatal(err)
		}
		c.Advance(dbprobe.MaxBackoff)
	}
	if got := p.ConnectTimeout(); got > raised/2 {
		t.Fatalf("connect timeout %v after a fast connect, still near the raised %v", got, raised)
	}
}

// After a failure the probe waits, doubling the pause up to MaxBackoff
// with jitter, and a probe asked for meanwhile does not touch the database.
func TestProbeBacksOffWithJitter(t *testing.T) {
	cc, proxy := behindProxy(t)
	c := clock.NewSim(time.Unix(1000, 0))
	jitter := 0.5 // a factor of 1.0
	p := dbprobe.New(dbprobe.Options{ConnConfig: cc, Timeout: time.Second, Clock: c, Jitter: func() float64 { return jitter }})
	defer p.Close()
	ctx := context.Background()
	if err := p.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.SetMode(faults.Refuse, 0)
	proxy.Reset()
	want := dbprobe.FirstBackoff
	for i := 0; i < 8; i++ {
		if err := p.Probe(ctx); err == nil || errors.Is(err, dbprobe.ErrBackoff) {
			t.Fatalf("probe %d against a refusing database: %v", i, err)
		}
		// ErrBackoff is returned before any database call. (Counting the
		// proxy's refusals instead races the proxy's accept loop, which
		// may note a refused connect of the probe after it returned.)
		c.Advance(want - time.Millisecond)
		if err := p.Probe(ctx); !errors.Is(err, dbprobe.ErrBackoff) {
			t.Fatalf("probe %d inside the %v backoff: %v", i, want, err)
		}
		c.Advance(time.Millisecond)
		want = min(2*want, dbprobe.MaxBackoff)
	}
	// Jitter spreads the pause: a factor of 0.5 to 1.5.
	jitter = 0
	if err := p.Probe(ctx); err == nil {
		t.Fatal("refused, yet the probe passed")
	}
	c.Advance(dbprobe.MaxBackoff / 2)
	proxy.SetMode(faults.Pass, 0)
	if err := p.Probe(ctx); err != nil {
		t.Fatalf("after the jittered pause and with the database back: %v", err)
	}
}

// A database that does not answer at all makes the probe wait longer each
// time, but not the pool: its timeout moves only on a successful connect.
func TestSilentDatabaseDoesNotSlowThePool(t *testing.T) {
	cc, proxy := behindProxy(t)
	c := clock.NewSim(time.Unix(1000, 0))
	p := dbprobe.New(dbprobe.Options{ConnConfig: cc, Timeout: 50 * time.Millisecond, Clock: c})
	defer p.Close()
	proxy.SetMode(faults.Blackhole, 0)
	var waits []time.Duration
	for i := 0; i < 4; i++ {
		start := time.Now()
		if err := p.Probe(context.Background()); err == nil {
			t.Fatal("a silent database passed the probe")
		}
		waits = append(waits, time.Since(start))
		c.Advance(dbprobe.MaxBackoff * 2)
		if got := p.ConnectTimeout(); got != 50*time.Millisecond {
			t.Fatalf("the pool's connect timeout moved to %v while nothing answered", got)
		}
	}
	if waits[3] < 150*time.Millisecond {
		t.Fatalf("the probe did not wait longer after timeouts: %v", waits)
	}
	t.Logf("probe waits: %v", waits)
}
