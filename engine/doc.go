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
// one (with the same executor ID) that continues each session from its last
// completed step.
//
// Import rule: everything in the module except cmd and integration.
package engine
