package queen_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestTimerFiresOnAnotherBrokerWhenItsSchedulerDies: a timer scheduled 2 s
// ahead on A, which is killed at once, is delivered by B exactly once, not
// before its deliverAt and within B's sweeper sleep after it (logged; the
// bound asserted is loose, only a broken sweeper misses it).
func TestTimerFiresOnAnotherBrokerWhenItsSchedulerDies(t *testing.T) {
	a, b := meshPair(t, "s", "s")
	code, body := post(t, "http://"+a.Addr()+"/api/v1/timers",
		`[{"op":"schedule","queue":"tq","timerKey":"k1","txn":"once","delayMs":2000,"payload":{"n":1}}]`)
	var sched struct {
		Results []struct {
			Status    string `json:"status"`
			DeliverAt string `json:"deliverAt"`
			MessageID string `json:"messageId"`
		} `json:"results"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &sched) != nil || sched.Results[0].Status != "scheduled" {
		t.Fatalf("schedule on a: %d %s", code, body)
	}
	a.Crash()
	deliverAt, err := time.Parse(time.RFC3339Nano, sched.Results[0].DeliverAt)
	if err != nil {
		t.Fatal(err)
	}
	c := http.Client{Timeout: 60 * time.Second}
	resp, err := c.Get("http://" + b.Addr() + "/api/v1/pop/queue/tq?wait=true&timeout=30000&autoAck=true")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got struct {
		Messages []struct {
			ID            string `json:"id"`
			TransactionID string `json:"transactionId"`
			CreatedAt     string `json:"createdAt"`
		} `json:"messages"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(raw, &got) != nil || len(got.Messages) != 1 || got.Messages[0].TransactionID != "once" {
		t.Fatalf("b's long poll: %d %s", resp.StatusCode, raw)
	}
	m := got.Messages[0]
	if m.ID != sched.Results[0].MessageID {
		t.Fatalf("delivered id %s, promised %s", m.ID, sched.Results[0].MessageID)
	}
	fired, err := time.Parse(time.RFC3339Nano, m.CreatedAt)
	if err != nil {
		t.Fatal(err)
	}
	if fired.Before(deliverAt) {
		t.Fatalf("fired at %v, before its deliverAt %v", fired, deliverAt)
	}
	t.Logf("fired by b %v after its deliverAt (b's sweeper sleeps at most 1 s)", fired.Sub(deliverAt))
	if late := fired.Sub(deliverAt); late > 10*time.Second {
		t.Fatalf("fired %v late", late)
	}
	time.Sleep(1500 * time.Millisecond) // another sweeper cycle or two
	if code, body := get(t, "http://"+b.Addr()+"/api/v1/pop/queue/tq?autoAck=true"); code != 204 {
		t.Fatalf("the timer fired twice: %d %s", code, body)
	}
	_, metrics := get(t, "http://"+b.Addr()+"/metrics/prometheus")
	for _, want := range []string{"queen_timers_fired_total 1\n", "queen_timers_delivery_lateness_milliseconds_count 1\n", "queen_timers_due 0\n"} {
		if !contains(metrics, want) {
			t.Errorf("b's metrics lack %q", want)
		}
	}
}

// TestKVTTLExpiresOnTheClock: a value put with ttlSeconds=1 is read before
// and is gone after.
func TestKVTTLExpiresOnTheClock(t *testing.T) {
	a, _ := meshPair(t, "s", "s")
	base := "http://" + a.Addr() + "/api/v1/kv/"
	req, _ := http.NewRequest(http.MethodPut, base+"sess/u1", jsonBody(`{"value":{"user":1},"ttlSeconds":1}`))
	req.Header.Set("Content-Type", "application/json") // a body of another type is 415
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("put: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, body := get(t, base+"sess/u1"); code != 200 || !json.Valid([]byte(body)) || !contains(body, `"found":true`) {
		t.Fatalf("read within the ttl: %d %s", code, body)
	}
	time.Sleep(1100 * time.Millisecond)
	if code, body := get(t, base+"sess/u1"); code != 200 || !contains(body, `"found":false`) {
		t.Fatalf("read after the ttl: %d %s", code, body)
	}
}
