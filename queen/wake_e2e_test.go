package queen_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/queen-go/queen/queen/store/storetest"
)

// TestLostWakeCostsOnlyThePeriodicFloor: a long poll parked on broker b,
// with no mesh and so no wake from a push on broker a, still delivers the
// message within the periodic floor: QUEEN_POP_WAIT_MAX plus slack for the
// re-check itself and a loaded machine. A lost wake costs latency, and this
// says how much. (A poll that slept its whole timeout unless woken took the
// full 10 s here.)
func TestLostWakeCostsOnlyThePeriodicFloor(t *testing.T) {
	const floor, slack = 200 * time.Millisecond, 1500 * time.Millisecond
	dsn := storetest.DSN(t)
	cfgA, cfgB := testConfig(t, dsn), testConfig(t, dsn)
	cfgA.ServerID, cfgB.ServerID = "a", "b"
	cfgB.PopWaitInitial, cfgB.PopWaitMax = 50*time.Millisecond, floor
	a, b := start(t, cfgA), start(t, cfgB)
	t.Cleanup(func() { a.Crash(); b.Crash() })
	c := http.Client{Timeout: 30 * time.Second}
	for i := range 3 {
		type answer struct {
			at   time.Time
			code int
			body []byte
		}
		got := make(chan answer, 1)
		go func() {
			resp, err := c.Get("http://" + b.Addr() + "/api/v1/pop/queue/wakes?wait=true&timeout=10000&autoAck=true")
			if err != nil {
				got <- answer{code: -1, body: []byte(err.Error())}
				return
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got <- answer{time.Now(), resp.StatusCode, raw}
		}()
		time.Sleep(700 * time.Millisecond) // parked, its back-off at the floor
		code, body := post(t, "http://"+a.Addr()+"/api/v1/push",
			fmt.Sprintf(`{"items":[{"queue":"wakes","transactionId":"w%d","payload":%d}]}`, i, i))
		pushed := time.Now()
		if code != 201 {
			t.Fatalf("push on a: %d %s", code, body)
		}
		ans := <-got
		var res struct {
			Messages []struct {
				TransactionID string `json:"transactionId"`
			} `json:"messages"`
		}
		if ans.code != 200 || json.Unmarshal(ans.body, &res) != nil || len(res.Messages) != 1 || res.Messages[0].TransactionID != fmt.Sprint("w", i) {
			t.Fatalf("b's long poll: %d %s", ans.code, ans.body)
		}
		if late := ans.at.Sub(pushed); late > floor+slack {
			t.Fatalf("delivered %v after the push committed on another broker with no wake: the floor is %v (+%v slack)", late, floor, slack)
		} else {
			t.Logf("poll %d: delivered %v after the push, with no wake", i, late.Round(time.Millisecond))
		}
	}
}
