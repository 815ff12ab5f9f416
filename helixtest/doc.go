// Package helixtest is the test kit for applications built on helix-dbos:
// it gives a test a real, migrated Postgres database and a running engine
// with the application's own agents, tools and a scripted model, and
// helpers that wait for results, answer approvals and client tools, and
// read a session's transcript and stream, failing the test (t.Fatal) with
// a message that says what was waited for.
//
//	func TestTriage(t *testing.T) {
//		t.Parallel()
//		e := helixtest.NewEngine(t, helixtest.EngineOptions{}, triageAgent(scripted.New(...)))
//		h := e.Start(triageAgent, "my printer is on fire")
//		e.AwaitPending(h.SessionID, "call-0-0")
//		e.Approve(h.SessionID, "call-0-0")
//		res := e.Await(h)
//		...
//	}
//
// # Databases
//
// [Database] gives each test its own database, cloned from a template
// migrated once per test binary, on one server per test binary: the one
// HELIX_DATABASE_URL names, or else a Postgres container started with
// testcontainers-go (Docker must be reachable; its data directory is in
// memory). Fifty parallel tests cost
// one server. Without either the test fails and says what to install or
// set; it is never skipped.
//
// # Engines
//
// [NewEngine] launches an engine on a fresh database (or on another
// engine's, EngineOptions.DatabaseURL, to run a replacement over the same
// sessions), with the shortest executor lease ([TestLease]), its logs in
// the test's log, and shuts it down at the test's cleanup. Every method of
// engine.Engine is available on it; its helpers wait at most
// EngineOptions.Timeout ([DefaultTimeout]).
//
// # Crashes
//
// EngineOptions.CrashAt stops a run at a point of the loop ([AfterModelCall],
// [AfterTool], [AfterCommit]) as a process killed there would, and
// [Engine.AwaitCrash] takes the engine down; [Engine.Replacement] starts the
// process that replaces it (same or new executor ID) and [Engine.Attach]
// reattaches to a run. [Executions], [Engine.RequireTranscriptOnce] and
// [Engine.RequireStreamGapFree] check that nothing was done or written
// twice.
//
// See docs/testing.md.
package helixtest
