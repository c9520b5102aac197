package queen_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queen-go/queen/queen/store/storetest"
)

// benchParallel runs op from `workers` goroutines for n operations in all
// and returns operations per second.
func benchParallel(n, workers int, op func(i int) error) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := op(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// BenchmarkPushVsRawPostgres measures single-item pushes through the
// broker's HTTP API against the same number of single-row INSERTs straight
// into PostgreSQL (a table with the same dedup key), on the same server in
// the same run, and reports the ratio.
func BenchmarkPushVsRawPostgres(b *testing.B) {
	dsn := storetest.DSN(b)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(context.Background(), `CREATE TABLE raw_baseline (id bigserial, partition text, txid text,
		payload jsonb, created_at timestamptz DEFAULT now(), UNIQUE (partition, txid))`); err != nil {
		b.Fatal(err)
	}
	br := start(b, testConfig(b, dsn))
	defer br.Shutdown(context.Background())
	url := "http://" + br.Addr() + "/api/v1/push"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	const workers = 16
	n := max(b.N, 200)
	b.ResetTimer()
	raw, err := benchParallel(n, workers, func(i int) error {
		_, err := pool.Exec(context.Background(), `INSERT INTO raw_baseline (partition, txid, payload) VALUES ($1, $2, $3)`,
			fmt.Sprint("p", i%8), fmt.Sprint("tx-", i), `{"n":1}`)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	queen, err := benchParallel(n, workers, func(i int) error {
		body := fmt.Sprintf(`{"items":[{"queue":"bench","partition":"p%d","transactionId":"tx-%d","payload":{"n":1}}]}`, i%8, i)
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			return fmt.Errorf("push: %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(raw, "raw_inserts/s")
	b.ReportMetric(queen, "pushes/s")
	b.ReportMetric(queen/raw, "ratio_to_raw")
}
