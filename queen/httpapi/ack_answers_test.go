package httpapi

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/queen-go/queen/queen/pushpath"
	"github.com/queen-go/queen/queen/spool"
	"github.com/queen-go/queen/queen/store"
	"github.com/queen-go/queen/queen/txn"
)

// keysOf is the sorted keys of v's JSON object, and the raw JSON.
func keysOf(t *testing.T, v any) (string, map[string]json.RawMessage) {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, " "), m
}

// The typed transaction, kv, buffered-push and error answers keep the keys
// the map answers had (sim/ops.go and Queen's clients read them): a push
// and an ack result carry different keys, an ack's error is a present
// null, a refusal's results are [] and a missing row's version and value
// are null.
func TestAckAnswersKeepTheirKeys(t *testing.T) {
	out, pushed := txnResults([]txn.Result{{Type: "push", MessageID: "m"}, {Type: "push", Duplicate: true}, {Type: "ack"}})
	pre := &store.KVPrecondition{Index: 1, Result: store.KVResult{Op: "put", Reason: "absent"}}
	failed := pushpath.Outcome{Buffered: []spool.Event{{Queue: "q"}}, SpoolErr: errors.New("disk full")}
	for _, c := range []struct {
		v     any
		keys  string
		nulls []string
	}{
		{out[0], "index messageId partitionId queueName success transactionId type", nil},
		{out[1], "duplicate index messageId partitionId queueName success transactionId type", nil},
		{out[2], "dlq error index success transactionId type", []string{"error"}},
		{txnAnswer{Results: out}, "results success transactionId", nil},
		{txnAnswer{Results: out, Timers: ptrTo([]timerResultWire{}), KV: ptrTo([]kvResultWire{})}, "kv results success timers transactionId", nil},
		{txnRolledBack("t", "gone", ""), "error results success transactionId", nil},
		{txnKVRefused("t", pre), "error failedIndex kvReason reason results success transactionId value version", []string{"value", "version"}},
		{kvRefused{Reason: "kv_precondition", kvPreconditionFailed: newKVPreconditionFailed(pre)}, "failedIndex kvReason ok reason value version", []string{"value", "version"}},
		{kvAnswer{Results: kvResults(nil)}, "results", nil},
		{bufferedPushes(pushpath.Outcome{Buffered: failed.Buffered})[0], "index partition queue queueName status transactionId transaction_id", nil},
		{bufferedPushes(failed)[0], "error index partition queue queueName status transactionId transaction_id", nil},
		{leaseExtended{}, "expiresAt leaseId lease_expires_at newExpiresAt renewed success", []string{"expiresAt", "lease_expires_at", "newExpiresAt"}},
		{errorAnswer{Error: "x"}, "error", nil},
	} {
		keys, m := keysOf(t, c.v)
		if keys != c.keys {
			t.Errorf("%T keys %q, want %q", c.v, keys, c.keys)
		}
		for _, k := range c.nulls {
			if string(m[k]) != "null" {
				t.Errorf("%T %s = %s, want null", c.v, k, m[k])
			}
		}
		for _, k := range []string{"results", "kv", "timers"} {
			if string(m[k]) == "null" {
				t.Errorf("%T %s is null, want a list", c.v, k)
			}
		}
	}
	if len(pushed) != 1 {
		t.Errorf("pushes to wake: %v, want the one that was not a duplicate", pushed)
	}
}
