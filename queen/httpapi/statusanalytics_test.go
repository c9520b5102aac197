package httpapi_test

import (
	"net/url"
	"testing"
	"time"
)

// status/analytics answers at most 10,000 points and says when it cut
// the window: truncated, pointLimit, and nextFrom where the rest starts,
// so a client pages on instead of reading a silently short series.
// Before, eight days by the minute answered the first 10,000 minutes and
// nothing to say the last 1,520 (holding the newest messages) were gone.
func TestStatusAnalyticsSaysWhenItCutsTheWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.push(item{"queue": "an", "transactionId": "now"})
	to := time.Now().UTC().Truncate(time.Minute).Add(2 * time.Minute)
	from := to.Add(-8 * 24 * time.Hour)
	series := func(from, to time.Time, interval string) (map[string]any, int, float64) {
		t.Helper()
		a := e.expect(e.do("GET", "/api/v1/status/analytics?interval="+interval+"&from="+url.QueryEscape(from.Format(time.RFC3339))+
			"&to="+url.QueryEscape(to.Format(time.RFC3339)), nil), 200).obj(t)
		points, _ := a["dataPoints"].([]any)
		var sum float64
		for _, p := range points {
			sum += p.(map[string]any)["messages"].(float64)
		}
		return a, len(points), sum
	}
	a, n, sum := series(from, to, "minute")
	next := from.Add(10000 * time.Minute).Format(time.RFC3339)
	if n != 10000 || a["truncated"] != true || a["pointLimit"] != float64(10000) || a["nextFrom"] != next || sum != 0 {
		t.Fatalf("eight days by the minute: %d points, %v messages, truncated %v, pointLimit %v, nextFrom %v (want %s)",
			n, sum, a["truncated"], a["pointLimit"], a["nextFrom"], next)
	}
	nextFrom, err := time.Parse(time.RFC3339, next)
	if err != nil {
		t.Fatal(err)
	}
	if a, n, sum := series(nextFrom, to, "minute"); n != 8*24*60-10000 || a["truncated"] != false || a["nextFrom"] != nil || sum != 1 {
		t.Fatalf("the rest from nextFrom: %d points, %v messages, truncated %v, nextFrom %v", n, sum, a["truncated"], a["nextFrom"])
	}
	if a, n, sum := series(from, to, "hour"); n < 8*24 || n > 8*24+1 || a["truncated"] != false || sum != 1 {
		t.Fatalf("eight days by the hour: %d points, %v messages, truncated %v", n, sum, a["truncated"])
	}
}
