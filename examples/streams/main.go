// Command streams is a small streaming pipeline run the way Queen's SDKs
// run one, against a queen broker (make run): it counts clicks per user in
// 10-second tumbling windows, keeping the counts in the query's state, and
// emits one sink message per window when the source runs dry.
//
//	go run ./examples/streams -url http://localhost:6632
//
// Every batch is committed by one cycle (state, sink, ack of the source)
// or not at all, so stopping it at any point and running it again counts
// each click exactly once.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"sort"
	"strings"
	"time"
)

const (
	query  = "example.clicks-per-user-10s"
	source = "example.clicks"
	sink   = "example.clicks-per-user"
	group  = "streams." + query
	sep    = "\x1f"
)

var base = flag.String("url", "http://localhost:6632", "the broker")

func main() {
	push := flag.Int("push", 30, "clicks to push first (0: none)")
	flag.Parse()
	var reg struct {
		QueryID string `json:"query_id"`
		Fresh   bool   `json:"fresh"`
	}
	call("/streams/v1/queries", map[string]any{"name": query, "source_queue": source, "sink_queue": sink, "config_hash": "v1"}, &reg)
	log.Printf("query %s (fresh: %v)", reg.QueryID, reg.Fresh)
	if *push > 0 {
		start := time.Now().Truncate(10 * time.Second).UnixMilli()
		var items []any
		for i := 0; i < *push; i++ {
			items = append(items, map[string]any{"queue": source, "partition": "site-a",
				"payload": map[string]any{"user": fmt.Sprint("u", i%3), "at": start + int64(i)*1000}})
		}
		call("/api/v1/push", map[string]any{"items": items}, nil)
		log.Printf("pushed %d clicks", *push)
	}
	partitions := map[string]bool{}
	for idle := 0; idle < 2; {
		n, pid := cycle(reg.QueryID)
		if n == 0 {
			idle++
			continue
		}
		idle, partitions[pid] = 0, true
		log.Printf("committed a cycle of %d clicks", n)
	}
	for pid := range partitions {
		flush(reg.QueryID, pid)
	}
}

type message struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId"`
	Data          struct {
		User string `json:"user"`
		At   int64  `json:"at"`
	} `json:"data"`
}

type window struct {
	Acc         int   `json:"acc"`
	WindowStart int64 `json:"windowStart"`
	WindowEnd   int64 `json:"windowEnd"`
}

// cycle pops a batch, folds it into the windows of its partition and
// commits the new counts with the ack of the batch's last click.
func cycle(queryID string) (int, string) {
	resp, err := http.Get(*base + "/api/v1/pop/queue/" + source + "?batch=10&wait=true&timeout=1000&consumerGroup=" + group)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return 0, ""
	}
	var batch struct{ Messages []message }
	decode(resp, &batch)
	pid := batch.Messages[0].PartitionID
	windows := state(queryID, pid)
	for _, m := range batch.Messages {
		startMs := m.Data.At - m.Data.At%10000
		key := "tumb:10" + sep + fmt.Sprint(startMs) + sep + m.Data.User
		w := windows[key]
		w.Acc, w.WindowStart, w.WindowEnd = w.Acc+1, startMs, startMs+10000
		windows[key] = w
	}
	var ops []any
	for k, w := range windows {
		ops = append(ops, map[string]any{"type": "upsert", "key": k, "value": w})
	}
	last := batch.Messages[len(batch.Messages)-1]
	var res struct {
		Success bool   `json:"success"`
		Error   string `json:"error"`
	}
	call("/streams/v1/cycle", map[string]any{"query_id": queryID, "partition_id": pid, "consumer_group": group,
		"state_ops": ops, "push_items": []any{},
		"ack": map[string]any{"transactionId": last.TransactionID, "leaseId": last.LeaseID, "status": "completed", "count": len(batch.Messages)}}, &res)
	if !res.Success {
		log.Printf("cycle rolled back (%s); its clicks come back after the lease", res.Error)
	}
	return len(batch.Messages), pid
}

// flush emits every window of a partition to the sink and deletes it, in
// one cycle without an ack.
func flush(queryID, pid string) {
	windows := state(queryID, pid)
	keys := make([]string, 0, len(windows))
	for k := range windows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ops, out []any
	for _, k := range keys {
		parts := strings.Split(k, sep)
		w := windows[k]
		ops = append(ops, map[string]any{"type": "delete", "key": k})
		out = append(out, map[string]any{"queue": sink, "partition": parts[2],
			"payload": map[string]any{"user": parts[2], "windowStart": w.WindowStart, "clicks": w.Acc}})
		fmt.Printf("%s  window %s  %d clicks\n", parts[2], time.UnixMilli(w.WindowStart).UTC().Format("15:04:05"), w.Acc)
	}
	call("/streams/v1/cycle", map[string]any{"query_id": queryID, "partition_id": pid, "state_ops": ops, "push_items": out, "ack": nil}, nil)
}

// state reads every window of a partition.
func state(queryID, pid string) map[string]window {
	var res struct {
		Rows []struct {
			Key   string `json:"key"`
			Value window `json:"value"`
		} `json:"rows"`
	}
	call("/streams/v1/state/get", map[string]any{"query_id": queryID, "partition_id": pid, "keys": nil}, &res)
	out := map[string]window{}
	for _, r := range res.Rows {
		out[r.Key] = r.Value
	}
	return out
}

func call(path string, body, out any) {
	raw, _ := json.Marshal(body)
	resp, err := http.Post(*base+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(resp.Body)
		log.Fatalf("%s: %d %s", path, resp.StatusCode, msg)
	}
	if out != nil {
		decode(resp, out)
	}
}

func decode(resp *http.Response, out any) {
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		log.Fatal(err)
	}
}
