// Package bench measures the engine's own cost per agent step against a
// real Postgres, beside the floors it is built on: a bare DBOS step and a
// single-row commit on the same pool. `helix-dbos bench` prints its report;
// the benchmarks in this package (`go test -bench . ./bench/`) report the
// same figures as benchmark metrics. Nothing here asserts a timing: targets
// are evaluated in the [Report] and written down in docs/performance.md.
//
// # Method
//
// The agent under test has a scripted model that answers instantly and one
// no-op tool. Every step but the last calls the tool once (call ID
// "call-<step>"); the last step answers in text, which completes the run.
// The model stamps the time it is entered and the time it returns, the tool
// measures its own body, and the engine overhead of step i is
//
//	overhead(i) = enter(i+1) − return(i) − tool(i)
//
// the wall time from the model returning step i to the model being called
// for step i+1, minus the tool's own work (microseconds for a no-op). That
// interval holds everything the engine does per step: the model step's
// checkpoint and tool_start chunks, the tool step, the commit transaction,
// the next model step's DBOS bookkeeping, state load, resync check,
// step_start chunk and request building. A session of N steps yields N−1
// samples.
//
// Phases, in order, each on the same engine and pool:
//
//   - warm-up: a short session and a few human-in-the-loop sessions, not
//     reported;
//   - floors: N `SELECT 1` round trips and N single-row INSERT commits
//     (autocommit) on the pool; a DBOS
//     workflow of N no-op RunAsStep calls (time between consecutive step
//     bodies); and a DBOS "agent-step skeleton", the DBOS operations an
//     agent step performs with no helix work in them (RunAsStep, one step
//     through dbos.Go, one RunAsTransaction);
//   - sequential: one session of [Config.Steps] steps: the overhead
//     distribution, and the overhead early in the session (steps 10–59)
//     against the end of it (the last 50 steps), to show growth with
//     history; and what it wrote per step (see Storage below);
//   - concurrent: [Config.Sessions] sessions of [Config.StepsPerSession]
//     steps started together; steps per second is all their steps over the
//     wall time from the first Execute to the last Result;
//   - human in the loop: [Config.HITLSamples] sessions of a second agent,
//     one after the other (see below);
//   - token streaming: [Config.StreamSessions] streams written and read at
//     once (see below).
//
// # Storage
//
// Around the sequential session (outside its SQL profile) a statement reads
// the size of every table of schemas helix and dbos, the WAL insert
// position and a new transaction ID; after it, the same, and the stored
// size of the session's messages. Per step, [Storage] is the tables'
// growth, the WAL written, the transactions that wrote (the second mark's
// own ID subtracted) and the message bytes, the content the database must
// keep. Everything written in that window counts: the engine's background
// work (a lease renewal, sweeps) and, for WAL and transaction IDs, which
// are the server's, other databases' writes.
//
// # Human in the loop
//
// The second agent's scripted model calls a client-executed tool at step 1
// and answers in text at step 2. Each session is started, and the bench
// waits, unmeasured, until the run is suspended (Handle.Result returns at
// once then) and its workflow has checkpointed the deadline of its DBOS
// Recv, the last thing it does before blocking: the submission then wakes
// a waiting run through Postgres NOTIFY instead of being found by the
// Recv's first look. The sample is
//
//	t1 − t0
//
// where t0 is taken just before SubmitToolResult and t1 is when the model
// is entered for step 2: the submission's transaction, the wake-up, the
// Recv, the call's resolution, step 1's commit and step 2's bookkeeping.
// SubmitToolResult's own duration is reported beside it. Each session is
// checked to have completed with both steps and the submitted result in
// front of the model at step 2.
//
// # Token streaming
//
// The streaming phase creates one session per stream (agent type
// [StreamAgentType]; a session's stream ID is its session ID), attaches a
// reader to each, then starts one writer per stream that writes a text
// delta every 20 ms (50 a second, a fast model), the writers phase-shifted
// over the 20 ms. Each delta carries the wall-clock time of its Write; the
// reader's sample is the time from it to Next returning the delta: the
// wait for its batch, the batch INSERT shared with other streams' deltas,
// the NOTIFY and the fetch. The store's batch counters give the INSERTs
// per delta.
//
// Every statement on the pool is traced (count and client-side time, by
// statement text), as is the time spent waiting for a pool connection, so a
// report shows where an agent step's time goes.
//
// # Storage under churn
//
// [Churn] is a separate mode (`helix-dbos bench --churn 5m`): workers start
// short sessions of the bench agent at a steady pace on an engine whose
// retention job ([engine.RetentionPolicy]) deletes completed sessions older
// than a short age, and every few seconds it samples each helix and dbos
// table (exact rows, total size, live and dead tuples, autovacuum runs). Its
// report shows whether the tables reach a plateau and what the job costs
// per deleted session, read from the job's gc.pass log lines.
//
// # Waiting sessions
//
// [Waiting] is another mode (`helix-dbos bench --waiting 10000`): what
// sessions waiting for a person cost today, each a workflow of the process
// that runs it, parked until the answer comes. The engine under measure
// runs in a worker process ([ServeWaitingWorker], the same binary run
// again, driven over stdin and stdout), so its resident set and goroutines
// are its own. The agent (type [WaitingAgentName]) calls a tool that needs
// approval at step 1 and answers in text at step 2; the tool and the step-2
// model call report the wall-clock time they ran. In order:
//
//   - a first worker launches (migrating a new database) and stops;
//     worker A launches, and its idle footprint is read: VmRSS from
//     /proc, goroutines and Go heap and stacks, each after a forced GC that
//     returns freed memory to the system; and the size of the helix and
//     dbos tables;
//   - A starts the sessions, 16 at a time, and the bench waits until each
//     run waits for its approval in A; A's footprint and the tables' size
//     again, divided by the sessions;
//   - A is killed (SIGKILL) and worker B launches with its executor ID, as
//     a restarted process: its Launch is timed, then the time until every
//     session waits again in B, and B's footprint once its goroutine count
//     holds still;
//   - sessions approved one at a time through an [engine.Client]: from just
//     before SubmitToolResult to the tool's run and to the model's next
//     call;
//   - the other sessions approved by concurrent callers: approvals per
//     second until the last SubmitToolResult returned, sessions completed
//     per second until all have;
//   - B stops cleanly. Every session must have woken once and completed.
//
// With [ApproveViaEngine] (`--waiting-approve-via engine`) the approvals go
// to worker B over its pipes and B's own engine submits them
// (Engine.SubmitToolResult), as a replica's request handler would: the
// submitting engine starts a hibernated run's continuation itself. The
// wake sample's start is taken before the request is written. With
// WaitingConfig.NoDrain (`--waiting-drain=false`) the wake and drain phases
// are skipped: B stops after the restart and the sessions are left waiting
// (or hibernated) in the database, to measure the restart of many
// sessions alone. With the environment variable [WorkerCPUProfileEnv]
// (HELIX_BENCH_WORKER_CPUPROFILE) set to a path prefix, each worker writes
// a CPU profile of its life to <prefix>.<migrate|A|B>.pprof; A's, killed,
// may be empty.
package bench
