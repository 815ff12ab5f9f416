package postgres

// ClusterExecutorsSQL is ReadCluster's query of the executors, for the
// test of its plan.
var ClusterExecutorsSQL = clusterExecutorsSQL

// WakeSweepSQL is ResendWakeups's statement, for the test of its plan.
const WakeSweepSQL = wakeSweepSQL

// CancelledSessionsSQL is ListSessionsCancelledThroughDBOS's statement, for
// the test of its plan.
var CancelledSessionsSQL = cancelledSessionsSQL

// PageSessionsQuery is PageSessions' query, for the test of its plans.
var PageSessionsQuery = pageSessionsQuery

// OrphanRunsSQL is ListOrphanRuns' query, for the test of its plan.
var OrphanRunsSQL = orphanRunsSQL

// ConversationCallsSQL is the read of a conversation's pending calls, for
// the test of its plan.
const ConversationCallsSQL = conversationCallsSQL

// TreeStreamsSQL is the read of a session tree's streams, for the test of
// its plan.
const TreeStreamsSQL = treeStreamsSQL
