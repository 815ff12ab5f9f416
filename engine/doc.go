// Package engine is the public runtime of helix-dbos: it runs agents as
// durable DBOS workflows over one Postgres database.
//
//	eng, err := engine.New(ctx, engine.Config{DatabaseURL: url})
//	eng.Register(agent)
//	err = eng.Launch(ctx)          // migrations, DBOS, recovery
//	h, err := eng.Execute(ctx, agent, engine.Input{Message: "hi"}, nil)
//	res, err := h.Result(ctx)
//	eng.Shutdown(ctx)
//
// Every run is one workflow (ID {sessionId}-turn-{N}, {sessionId}-resume-{N}
// or {sessionId}-retry-{N}); every model call, tool call and step commit is
// a checkpointed step, so a process that dies at any instant is replaced by
// one that continues each session from its last completed step: a restart
// with the same executor ID at once, or any live engine of the cluster once
// the dead one's lease expired (Config.ExecutorLease; docs/operations.md).
//
// Import rule: everything in the module except cmd and integration.
package engine
