// Package server is the HTTP agent server of helix-dbos: the routes of the
// specification's Agent Server over an [engine.Engine], with fail-closed
// authentication, per-principal session ownership, resumable server-sent
// event streams, health checks and Prometheus metrics.
//
//	eng, _ := engine.New(ctx, engine.Config{DatabaseURL: url, ExecutorID: "web-1"})
//	srv, err := server.New(eng, server.Config{
//		Agents:       []*helix.Agent{assistant},
//		Authenticate: func(r *http.Request) (server.Principal, error) { return userFromToken(r) },
//	})
//	_ = eng.Launch(ctx) // after New, which registers the agents: Launch recovers their sessions
//	httpSrv := &http.Server{Addr: ":8080", Handler: srv.Handler()}
//	go httpSrv.ListenAndServe()
//	// on SIGTERM:
//	_ = srv.Shutdown(ctx)     // refuse new requests, end SSE and chat streams cleanly
//	_ = httpSrv.Shutdown(ctx) // let in-flight requests finish
//	_ = eng.Shutdown(ctx)     // runs stop at a step boundary; the next Launch recovers them
//
// The server keeps no session state in memory. Every route reads and
// writes Postgres through the engine, and streams are read from Postgres,
// so any instance serves any session: start a run on one, stream it from a
// second, approve its tool call on a third.
//
// # Routes
//
// Bodies are JSON objects sent with Content-Type application/json
// (parameters such as charset allowed; anything else, or none, is 415
// unsupported_media_type), at most Config.MaxBodyBytes; unknown fields are
// refused. Requiring application/json is also the routes' defence against
// cross-site requests: browsers send a cross-origin POST without asking
// the server first (a CORS preflight) only with the content types of HTML
// forms, so a page on another origin cannot post with a visitor's
// cookies.
//
//	POST /start               StartRequest  -> 202 RunResponse
//	    {agentType, message?, messages?, sessionId?, state?, metadata?, tags?}
//	    -> {sessionId, runId, streamUrl}
//	    A new session (its UserID is the caller's principal), or with the
//	    sessionId of a completed session its next turn. messages are user
//	    messages only, unless Config.AllowAnyMessageRole is set.
//	POST /resume              ResumeRequest -> 202 RunResponse
//	    {sessionId, message?} -> {sessionId, runId, streamUrl}
//	    An interrupted session continues from its last committed step; a
//	    session waiting for tool results gets its waiting run back.
//	GET  /sse?sessionId=&fromSequence=   text/event-stream (see Streaming)
//	GET  /status?sessionId=&runs=        200 StatusResponse
//	    {sessionId, agentType, status, stepCount, output, error, errorCode,
//	     currentRunId, pendingToolCalls: [{toolCallId, toolName, kind, input,
//	     approvalId, deadline, ownerSessionId, step, createdAt}],
//	     runs (with runs=true): [{runId, turn, status, stepCount, startSequence,
//	     previousRunId, startedAt, completedAt}]}
//	POST /interrupt           ControlRequest {sessionId, reason?} -> 202 {sessionId, status: "interrupt_requested"}
//	POST /abort               ControlRequest {sessionId, reason?} -> 200 {sessionId, status: "aborted"}
//	POST /submit-tool-result  SubmitRequest -> 200 helix.SubmitResult
//	    {sessionId, kind: "client-tool-result", toolCallId, result | error}
//	    {sessionId, kind: "approval-response", toolCallId, approved, reason?}
//	    -> {toolCallId, ownerSessionId, runId, toolName, kind, alreadyCompleted?, remaining?}
//	    The run waiting for the call continues by itself (no /resume needed).
//	POST /retry               RetryRequest -> 202 RunResponse
//	    {sessionId, checkpointId?, fromStart?, message?} -> {sessionId, runId, streamUrl}
//	    A failed or interrupted root session runs again in a new run, from
//	    checkpointId (default its latest checkpoint) or from its first input
//	    (Engine.Retry): later messages are dropped, the stream is cut back
//	    and carries a stream_resync (reason retry).
//	POST /branch              BranchRequest -> 202 RunResponse
//	    {sessionId, checkpointId?, newSessionId?, message?} -> {sessionId, runId, streamUrl}
//	    A new session of the caller (newSessionId, default a UUIDv7) starts
//	    from a checkpoint of one of its root sessions (default the latest),
//	    with the checkpoint's messages and state; the source is unchanged.
//	POST /delete              DeleteRequest {sessionId, force?} -> 200 DeleteResponse
//	    -> {sessionId, status: "deleted", sessions, workflows, rows}
//	    One of the caller's root sessions is deleted for good with its whole
//	    tree: sub-agents, companions, messages, checkpoints, runs, streams,
//	    usage, and the DBOS rows of every workflow of their runs
//	    (Engine.DeleteSession). A tree with a run in progress is 409
//	    session_running unless force, which aborts the run and waits for its
//	    workflows to end. A session deleted before is 404 session_not_found,
//	    as any missing session (a 404 is what a retried delete gets).
//	GET  /healthz             200 {"status":"ok"} when the database answers within 2 s, else 503
//	GET  /metrics             Prometheus exposition (see Metrics)
//	POST /chat, /chat/...     Config.Chat, when set (the AI SDK routes of server/aisdk)
//	GET  /, /inspector/...    the web inspector (see Inspector), unless Config.DisableInspector
//
// Any other path is 404 not_found; a known path with another method is 405
// method_not_allowed with an Allow header.
//
// # Authentication and ownership
//
// New refuses to build without Config.Authenticate unless
// Config.AllowUnauthenticated is set. Authenticate runs before every
// session route and the Chat handler; an error (or an empty principal) is
// 401 unauthenticated. /healthz and /metrics are not authenticated (they
// reveal no session data); put them behind your own middleware if needed.
//
// POST /start stores the caller's principal as the session's UserID. Every
// route that names a session answers 404 session_not_found unless the
// caller is the owner of the session's root session (a sub-agent or
// companion session belongs to its root's owner), exactly as for a session
// that does not exist, so IDs of other principals' sessions cannot be
// probed. Sessions created outside the server (no UserID) are visible to
// no authenticated caller. Without Authenticate every caller is Principal
// "" and sees every session.
//
// A session ID that no session can have (invalid UTF-8, control
// characters) is answered 404 session_not_found like any missing session.
//
// The Chat handler gets the caller as PrincipalFromContext tells it: the
// handler of server/aisdk takes it with Options.Authenticate set to
// aisdk.ServerPrincipal, which also accepts the principal "" of a server
// without Authenticate (AllowUnauthenticated), so the chat routes work in
// both modes.
//
// # Errors
//
// Every error is JSON, {"error": {"code", "message", "requestId",
// "details"?}}; the message says what went wrong and what to do, and never
// contains internal error text or SQL. Internal errors are logged with the
// request ID (also the X-Request-ID response header; a client's sane
// X-Request-ID is kept).
//
//	status  code                     when
//	400     invalid_json             the body is not one JSON object (or is empty)
//	400     unknown_field            the body has fields the route does not know (details: unknownFields, knownFields)
//	400     invalid_request          a field is missing, of the wrong type or invalid (sessionId, state, messages, reason,
//	                                 a string with U+0000, which the database cannot store, ...)
//	400     unknown_agent            /start: agentType names no agent of the server (details: knownAgents)
//	400     invalid_resume_position  /sse: a resume position is not an integer >= 0 or is past the stream's end
//	400     invalid_submission       /submit-tool-result: the submission's shape is wrong
//	400     invalid_result           /submit-tool-result: the result fails the tool's output schema (details: violations)
//	400     not_root_session         /submit-tool-result: submit on the conversation's root session;
//	                                 /delete: delete the root session (its tree goes with it)
//	401     unauthenticated          Authenticate refused the request
//	404     session_not_found        no such session, or not the caller's (or an ID no session can have)
//	404     unknown_tool_call        /submit-tool-result: no such call waits in the session
//	404     checkpoint_not_found     /retry, /branch: checkpointId is not a checkpoint of the session
//	404     not_found                no such route
//	405     method_not_allowed       the route does not accept the method (Allow header)
//	409     already_running          the session is running: wait, or interrupt it
//	409     session_running          /delete: a run of the tree is in progress: interrupt or abort it, or force
//	409     not_resumable            /resume: the session cannot be resumed (message says why)
//	409     not_running              /interrupt, /abort: the session is not running
//	409     session_not_continuable  /start with sessionId: the session is interrupted, failed or a sub-agent
//	409     agent_mismatch           /start with sessionId: the session runs another agent
//	409     awaiting_tool_results    /resume with a message while the session waits for tool results
//	409     unknown_agent            /resume: the session's agent is not served here
//	409     kind_mismatch, timed_out, session_interrupted, session_not_waiting
//	                                 /submit-tool-result: the call cannot take this submission now
//	413     body_too_large           the body exceeds Config.MaxBodyBytes
//	415     unsupported_media_type   the body is not sent with Content-Type application/json
//	500     internal_error           anything else (logged with the request ID)
//	503     shutting_down            the server is shutting down: retry on another instance
//	503     database_unavailable     /healthz: the database did not answer
//
// # Streaming
//
// GET /sse?sessionId= streams the session's stream in the wire format of
// the stream protocol, one event per chunk, its id the chunk's sequence:
//
//	id: 42
//	data: {"type":"chunk","chunk":{"type":"text_delta",...},"sequence":42}
//
// The chunk is the stored JSON, byte for byte, except the text of a
// failure with code internal_error (error and tool_end chunks): that is
// the engine's own error, possibly with SQL, and clients read a generic
// message instead (as in /status, the fail event and the chat routes of
// server/aisdk, which apply the same redaction; the engine logs the
// cause). The stream's stream_end is
// the last event, {"type":"end","finalOutput":...} (with its id); a failed
// stream ends with {"type":"fail","error":"..."}; then the response ends.
// An interrupted run does not end the stream (the session's stream goes on
// when it is resumed): the response stays open with the run_interrupted
// chunk. Comment lines (": ping") keep idle connections open every
// Config.HeartbeatInterval.
//
// Position. X-Resume-From-Sequence, else Last-Event-ID, else ?fromSequence=
// is the last sequence the client has seen: only chunks after it are sent,
// in order, each once, so a client that reconnects with the id of the last
// event it received (as EventSource does) continues without duplicates or
// gaps, on any server instance. Without a position the stream starts at
// the current run's first chunk (the streamUrl of /start and /resume pins
// that run's first chunk with fromSequence).
//
// End. A client whose position is the last event of an ended or failed
// stream has everything: it gets 204 No Content. EventSource reconnects
// whenever a response ends, end and fail events included, with the id of
// the last event it received (the end event's; for a failed stream, its
// error chunk's, as the fail event has no id), and a 204 is what makes it
// stop instead of replaying the end every few seconds. (The stream
// protocol specifies the events, not what follows them; a client that
// missed the fail event but has the error chunk has the failure.) A client
// positioned before the end still gets the rest and the end event.
//
// Truncation (G4). A crash recovery or retry may remove chunks after the
// client's position while it reads. The server then sends
// {"type":"truncated","truncatedAtStep":n,"atSequence":m} (no id) and goes
// on with the surviving chunks, where the engine's stream_resync chunk
// tells the client to reload the session (GET /status). The response is
// not closed: a reconnect would not see the event.
//
// The response ends cleanly, without an end event, when the server shuts
// down or a read fails; clients reconnect with Last-Event-ID. Each write
// (event, comment, flush) must complete within Config.StreamWriteTimeout:
// a client that stops reading is dropped then, instead of holding its
// handler and the server's Shutdown.
//
// # Inspector
//
// A web page over the routes above, embedded in the binary (no build step,
// no CDN: it works offline). GET / redirects to /inspector/; the pages
// /inspector/ (sessions), /inspector/sessions/{id} (a session: transcript,
// timeline of runs and checkpoints, sub-agent tree, the calls waiting for
// an answer, live updates from GET /sse) and /inspector/cluster (executors
// and queues) serve one shell whose script routes on the path; its assets
// are under /inspector/assets/. The shell and assets hold no data and are
// served without authentication. The data comes from JSON routes that
// authenticate and scope exactly like the session routes:
//
//	GET /inspector/api/sessions?status=&agent=&principal=&from=&to=&q=&roots=&limit=&after=|before=
//	    -> {sessions: [{sessionId, agentType, parentSessionId?, status, stepCount, messageCount, userId?,
//	        createdAt, updatedAt}], nextCursor?, prevCursor?}
//	    Newest first, by keyset (after: older than the cursor; before: newer),
//	    limit 1–200 (default 50); status a session status, from/to RFC 3339
//	    bounds on the creation time, q an ID prefix, roots=false to include
//	    sub-agent sessions. An authenticated caller lists its own sessions
//	    only, whatever principal says; without Authenticate, principal
//	    filters by owner.
//	GET /inspector/api/session?sessionId=
//	    -> {session: StatusResponse with runs, userId?, tags?, metadata?, messages, messagesOffset,
//	        messagesTotal, checkpoints: [{id, runId, stepCount, messageCount, status, createdAt}],
//	        checkpointsTotal, children: [sub-session ref with its children], childrenTruncated?}
//	    The latest 1000 messages and checkpoints; the tree of sessions it
//	    started, depth first, at most 200.
//	GET /inspector/api/cluster
//	    -> {executors: [{executorId, applicationVersion, hostname?, pid?, startedAt, heartbeatAt,
//	        leaseExpiresAt, alive, stoppedAt?, takenOverBy?, sessionsOwned, sessions}],
//	        queues: [{queue, depth, running, oldestWaitSeconds}]}
//	    Cluster-wide counts (sessionsOwned: the sessions whose current run is
//	    pending under the executor), which any authenticated caller reads;
//	    sessions names the caller's own among them (at most 50).
//
// The page acts through the routes above (/interrupt, /resume, /abort,
// /retry, /branch, /submit-tool-result) with the user's bearer token, so
// their checks and exactly-once guarantees are the API's own. Every
// response under / and /inspector/ carries a Content-Security-Policy
// allowing scripts, styles and requests from the server's origin only
// (no inline code, no frames), X-Content-Type-Options: nosniff and
// Referrer-Policy: no-referrer; the script renders model and tool text as
// text, never as HTML.
//
// # Metrics
//
// Served at GET /metrics from the private registry (or Config.Metrics when
// it is a prometheus.Gatherer). From the server process:
//
//	helix_http_requests_total{route,method,code}            counter
//	helix_http_request_duration_seconds{route,method}       histogram (not /sse, /chat)
//	helix_sse_connections                                   gauge: open /sse responses
//	helix_sse_chunks_sent_total                             counter
//	helix_stream_lag_seconds                                histogram: now - chunk timestamp when sent,
//	                                                        for chunks written while the client was connected
//
// From the database (one round trip, at most 2 s; the whole cluster's
// counts, whichever instance is scraped). /metrics is not authenticated
// and these queries count whole tables, so their figures are read at most
// once per Config.DatabaseMetricsMaxAge (15 s by default): concurrent
// scrapes share one query, later ones reuse its figures (a failed query is
// remembered as long), and scrapes cannot load the database:
//
//	helix_database_up                                       1 when the queries succeeded
//	helix_runs{status}                                      gauge: runs by status (suspended_* are suspensions)
//	helix_sessions{status}                                  gauge: sessions by status
//	helix_steps_committed_total                             counter: committed steps (checkpoints)
//	helix_model_calls_total{success}                        counter
//	helix_tool_calls_total{type,success}                    counter: type tool or subagent
//	helix_pending_tool_calls{kind}                          gauge: calls waiting for a submission now
//	helix_tool_submissions_total                            counter: suspended calls answered
//	helix_tool_submission_wait_seconds_total                counter: their total wait
//	helix_queue_depth{queue}                                gauge: workflows waiting in a DBOS queue for a slot
//	helix_queue_running{queue}                              gauge: workflows holding a slot of a DBOS queue
//	helix_queue_oldest_wait_seconds{queue}                  gauge: the wait of the oldest one waiting
//	helix_queue_started_last_minute{queue}                  gauge: workflows a queue started in the last minute
//	helix_queue_wait_seconds_last_minute{queue}             gauge: their mean wait for a slot
//
// The database counts shrink when sessions are deleted; Prometheus treats
// that as a counter reset.
//
// From the engine (engine.Engine.Metrics, registered by New; what this
// process did; labels are the application's agent, model and tool names):
//
//	helix_step_duration_seconds{agent}                      histogram: agent steps run here (not those that waited for a person)
//	helix_model_call_duration_seconds{agent,model,success}  histogram: model call latency
//	helix_tool_call_duration_seconds{agent,tool,success}    histogram: server tool latency
//	helix_suspension_wait_seconds{agent,kind,outcome}       histogram: a call's wait for a person, from its durable
//	                                                        suspension (across restarts); kind client_tool or approval,
//	                                                        outcome answered, approved, denied, timed_out or error
//	helix_run_recoveries_total{agent}                       counter: executions that continued a run from its journal
//	helix_executor_takeovers_total                          counter: executors taken over by this process
//	helix_takeover_workflows_total                          counter: their pending workflows re-enqueued
//
// # Tracing
//
// POST /start and the chat routes (Config.Chat, server/aisdk) take a W3C
// traceparent header: a session they start continues the caller's trace
// (unless the request's context has a span already, from middleware such
// as otelhttp). The spans themselves come from the engine
// (engine.Config.TracerProvider); docs/observability.md lists them.
package server
