package postgres

// The transaction-control statements of callers that send a transaction
// in pieces over one connection, to save round trips: the step journal
// (workflows) queues BEGIN with a transaction's first statements and COMMIT
// with its last in one batch, and the engine's answer path pipelines a
// whole transaction (Pipelined). They are here so that every statement the
// engine sends is written in this package.
const (
	// BeginSQL starts a transaction at the connection's default isolation
	// (READ COMMITTED).
	BeginSQL = "BEGIN"
	// CommitSQL commits it.
	CommitSQL = "COMMIT"
	// RollbackSQL rolls back what is not committed; outside a transaction
	// Postgres answers with a warning and does nothing.
	RollbackSQL = "ROLLBACK"
)

// IsAbortedTransaction reports whether err is Postgres refusing a
// statement in a transaction that an earlier failed statement aborted
// (25P02, in_failed_sql_transaction): nothing more of it can commit.
func IsAbortedTransaction(err error) bool { return pgCode(err) == "25P02" }
