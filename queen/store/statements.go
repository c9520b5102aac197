package store

import (
	"github.com/queen-go/queen/queen/sqlargs"
)

// statement is one named statement: its text and, when it has one, the
// params struct that is its argument list (a zero value; nil when the
// statement takes named arguments or its arguments are bound by hand).
type statement struct {
	text   string
	params any
}

// statements is the statement table: every statement that has a canary
// variant (canaries.go) or a params struct, by name. Its texts are built
// once, at package initialisation; a call gets its text through text(name),
// which in the canary build applies the switched-on canary's rewrites.
var statements = map[string]statement{
	"move.queue":          {moveQueueSQL, moveQueueParams{}},
	"move.drop_tombstone": {dropTombstoneSQL, dropTombstoneParams{}},
	"move.sequences":      {moveSequencesSQL, moveFixParams{}},
	"move.dlq_counts":     {moveDLQCountsSQL, moveFixParams{}},
	"move.stored":         {moveStoredSQL, moveFixParams{}},
	"move.pop_marks":      {movePopMarksSQL, moveFixParams{}},
	"append":              {appendSQL, appendParams{}},
	"pop":                 {popText(false, false), popParams{}},
	"pop.one":             {popText(false, true), popParams{}},
	"pop.partition":       {popText(true, false), popPartitionParams{}},
	"pop.partition.one":   {popText(true, true), popPartitionParams{}},
	"pop.many":            {popManySQL, popManyParams{}},
	"subscribe":           {subscribeSQL, subscribeParams{}},
	"seek":                {seekSQL, nil},
	"lease.extend":        {extendSQL, nil},
	"lease.queues":        {leaseQueuesSQL, nil},
	"timer.claim":         {claimTimersSQL, nil},
	"kv.get":              {kvGetSQL, nil},
	"kv.getMany":          {kvGetSQL, nil},
	"kv.getPrefix":        {kvGetPrefixSQL, nil},
	"kv.getPrefixOpen":    {kvGetPrefixOpenSQL, nil},
	"retention.expired":   {retentionRuleSQL("expired"), nil},
	"retention.completed": {retentionRuleSQL("completed"), nil},
	"retention.evicted":   {retentionRuleSQL("evicted"), nil},
	"partitions.lookup":   {lookupPartitionsSQL, LookupPartitionsParams{}},
	"queues.create":       {createQueuesSQL, CreateQueuesParams{}},
	"queues.held":         {queueHeldSQL, QueueHeldParams{}},
	"partitions.create":   {createPartitionsSQL, CreatePartitionsParams{}},
	"consumers.create":    {createConsumersSQL, CreateConsumersParams{}},
	"popMark.set":         {popMarkSetSQL, PopMarkParams{}},
	"watermark":           {watermarkSQL, WatermarkParams{}},
	"subscription.live":   {subscriptionLiveSQL, SubscriptionLiveParams{}},
	"txn.lock":            {txnLockSQL, TxnLockParams{}},
	"ack.completed":       {ackCompletedSQL, ackCompletedParams{}},
	"ack.read":            {ackReadSQL, AckReadParams{}},
	"ack.cursors":         {ackCursorsOnlySQL, AckCursorsParams{}},
	"ack.write":           {ackWriteSQL, AckWriteParams{}},

	// A streams cycle's (queen/streams composes them).
	"streams.cycleCheck":    {cycleCheckSQL, CycleCheckParams{}},
	"streams.stateUpsert":   {stateUpsertSQL, StateUpsertParams{}},
	"streams.stateDelete":   {stateDeleteSQL, StateDeleteParams{}},
	"streams.cycleAckCheck": {cycleAckCheckSQL, CycleAckCheckParams{}},
	"streams.cycleAck":      {cycleAckSQL, CycleAckParams{}},
}

// baseText is the production text of the statement named name. An unknown
// name is a programming error (TestStatementNamesAreRegistered reads every
// text call of the package), so it panics rather than run no statement.
func baseText(name string) string {
	st, ok := statements[name]
	if !ok {
		panic("store: no statement named " + name)
	}
	return st.text
}

// argsOf is a params struct as its statement's arguments (sqlargs.Of):
// TestParamsMatchPlaceholders holds each to its text.
var argsOf = sqlargs.Of
