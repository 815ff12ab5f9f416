package store

// DatabaseStats are the figures of a whole database that monitoring
// exports (package server's database metrics), read in one round trip.
type DatabaseStats struct {
	// Runs counts the runs by status.
	Runs map[string]int64
	// Sessions counts the sessions by status.
	Sessions map[string]int64
	// Steps counts the committed steps (checkpoints) of every session.
	Steps int64
	// Usage counts the usage records by source type (UsageModel,
	// UsageTool, UsageSubAgent, UsageClientToolWaitMS) and success.
	Usage []UsageCount
	// PendingCalls counts the tool calls waiting for an answer, by
	// submission kind.
	PendingCalls map[string]int64
	// Queues are the DBOS queues with work in them.
	Queues []QueueStats
	// QueueStarts are the DBOS queues' starts of the last minute.
	QueueStarts []QueueStarts
}

// UsageCount is the count and the sum of the values of the usage records
// of one source type and outcome.
type UsageCount struct {
	SourceType string
	Success    bool
	Count      int64
	Sum        float64
}

// QueueStats is one DBOS queue with work in it: the workflows waiting for
// a slot (ENQUEUED), those holding one (PENDING), and the wait of the
// oldest waiting one.
type QueueStats struct {
	Queue             string
	Depth             int64
	Running           int64
	OldestWaitSeconds float64
}

// QueueStarts are the workflows a DBOS queue started in the last minute
// and their average wait for a slot.
type QueueStarts struct {
	Queue          string
	Started        int64
	AvgWaitSeconds float64
}
