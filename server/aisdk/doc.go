// Package aisdk serves chat routes that speak the Vercel AI SDK's UI
// message stream protocol, so a React useChat front end (or any AI SDK
// Chat) talks to a helix-dbos backend directly, client-executed tools and
// tool approvals included:
//
//	h, err := aisdk.NewHandler(eng, aisdk.Options{
//		Agents:       []*helix.Agent{assistant},
//		Authenticate: func(r *http.Request) (string, error) { return userFrom(r) },
//	})
//	mux.Handle("/chat", h)
//	mux.Handle("/chat/", h)
//
// and in the browser:
//
//	const { messages, sendMessage, addToolOutput, addToolApprovalResponse } = useChat({
//		id: chatId,   // the helix session ID
//		transport: new DefaultChatTransport({ api: '/chat' }),
//		sendAutomaticallyWhen: ({ messages }) =>
//			lastAssistantMessageIsCompleteWithToolCalls({ messages }) ||
//			lastAssistantMessageIsCompleteWithApprovalResponses({ messages }),
//		onToolCall: async ({ toolCall }) => { ... addToolOutput({ tool, toolCallId, output }) },
//	});
//
// Package server mounts the handler as its Config.Chat, with
// Options.Authenticate set to ServerPrincipal (the principal the server
// authenticated; "" under a server with AllowUnauthenticated):
//
//	chat, _ := aisdk.NewHandler(eng, aisdk.Options{Agents: agents, Authenticate: aisdk.ServerPrincipal})
//	srv, _ := server.New(eng, server.Config{Agents: agents, Authenticate: auth, Chat: chat})
//
// Stop it with Handler.Shutdown before http.Server.Shutdown (package
// server's Shutdown does it for its Chat).
//
// # Routes
//
//	POST /chat                                  the useChat request; streams the response
//	GET  /chat/{sessionId}/stream               reconnect (useChat resume); 204 when nothing is active
//	POST /chat/{sessionId}/submit-tool-result   answer one call: {toolCallId, output | error | approved [, reason]}
//
// POST /chat takes the body DefaultChatTransport sends: {id, messages,
// trigger, messageId}. The chat id is the helix session ID. The server's
// transcript is authoritative: of messages it reads only the last one.
// Request bodies must be sent with Content-Type application/json (as
// DefaultChatTransport does; 415 unsupported_media_type otherwise): a
// browser cannot send that cross-origin without a CORS preflight, so a
// page on another origin cannot post to the chat with a visitor's
// cookies.
//
//   - A user message starts a turn: the chat's first message creates the
//     session (UserID = the principal; the agent is the body's "agent"
//     field, or Options.Agents[0]), a later one continues the completed
//     session (engine.Execute with ExecuteOptions.SessionID, and
//     ExecuteOptions.UserID = the principal, so the engine checks the
//     owner again in the transaction that continues the session: a race
//     ends in 404 session_not_found too). Text parts
//     are joined; file parts are refused (400). A chat that waits for tool
//     answers gets 409 awaiting_tool_results, a running one 409
//     already_running, an interrupted or failed one 409
//     session_not_continuable.
//   - An assistant message is a continuation, as useChat sends it after
//     addToolOutput or addToolApprovalResponse when sendAutomaticallyWhen
//     holds: every tool part that answers a call the chat waits for (state
//     output-available or output-error without providerExecuted, or
//     approval-responded) is submitted with engine.SubmitToolResult, then
//     the run's continuation is streamed into the same assistant message.
//     Parts for calls that no longer wait are history and ignored, so a
//     retried request is harmless. Answers of the wrong kind are refused
//     (400 kind_mismatch) before any is submitted; an answer the engine
//     rejects (invalid_result, …) ends the request with its code, and the
//     ones submitted before it stand. A continuation that answers nothing
//     while calls wait answers 409 awaiting_tool_results; one for a chat
//     that waits for nothing and has nothing unseen answers 409
//     no_pending_tool_calls (an empty stream would let the client resubmit
//     forever).
//
// regenerate-message is refused (400): the transcript lives on the server.
//
// The explicit route answers JSON (helix.SubmitResult) and streams
// nothing: the client follows the continuation with GET …/stream. With an
// AI SDK Chat, record the answer on the message first
// (addToolApprovalResponse without an automatic send), then reconnect from
// the message's metadata.helix.sequence (a DefaultChatTransport with
// resumeStreamIsReplay: false and X-Resume-From-Sequence and
// X-Existing-Message-Id in prepareReconnectToStreamRequest): the Chat keeps
// the message it continues only while a tool part is approval-responded,
// input-streaming or provider-executed input-available, so for a client
// tool's output the continuation request above is the path.
//
// Every route authenticates first (401 unauthenticated, also for an empty
// principal, except under package server's AllowUnauthenticated, where
// every caller is ""; NewHandler refuses to build without
// Options.Authenticate unless AllowUnauthenticated), and a
// chat whose root session belongs to another principal, or a sub-agent's
// session, is 404 session_not_found. Errors are {"error": {"code",
// "message", "details"?}} with the stable codes of this package (the same
// as package server's where the meaning is the same) and the engine's
// submission codes; messages never carry internal error text.
//
// # Responses end when the run waits
//
// A response streams the run live from Postgres (any process may run it)
// and ends with finish when the run ends, or when it suspends on a client
// tool or an approval and the client has every chunk written so far
// (finishReason "tool-calls"). Chunks arrive as the database notifies them;
// a suspension writes no chunk, so the run's status is checked, but only
// while the stream is idle: Options.PollInterval after the last chunk, then
// with a doubling pause up to Options.MaxPollInterval (2 s). The durable
// run keeps waiting, for days if need be; the client answers and gets the
// continuation in a new response. The finish chunk's messageMetadata is
// {"helix": {"sessionId", "runId", "sequence", "status"}}: sequence is the
// last stream sequence the response carried, and a continuation request
// whose assistant message still has it resumes exactly there (otherwise at
// the stream's end when it arrives). Each event derived from a stored chunk
// carries "id: <sequence>".
//
// A response also ends, without finish, when the handler shuts down
// (Handler.Shutdown, or package server's Shutdown: the durable run goes
// on, and the client reconnects with GET …/stream, to any instance), and
// when a write does not complete within Options.WriteTimeout (a client
// that stopped reading is dropped instead of holding the handler). An AI
// SDK Chat does not reconnect by itself: it calls onFinish with no
// finishReason (and isAbort, isError false), where the application calls
// resumeStream (useChat's resumeStream).
//
// # Reconnecting
//
// GET /chat/{id}/stream follows the chat's latest run. Without resume
// headers it replays that run from its beginning, which is what AI SDK 7's
// DefaultChatTransport expects by default (resumeStreamIsReplay: the
// client rebuilds the message from the first start chunk, so nothing is
// duplicated), and answers 204 when the run ended (nothing to resume: a
// page load's resume must not repeat the last answer). With
// X-Resume-From-Sequence (or, when absent, Last-Event-ID) it continues
// after that sequence, for transports created with resumeStreamIsReplay:
// false, and answers 204 only when the client already has everything: a
// run that ended between a submission and the reconnect still delivers its
// end. A text, reasoning or tool-input part that was open at that sequence
// is opened again (a new part), since the client may no longer have it
// open. X-Existing-Message-Id becomes the start chunk's messageId, so the
// client continues the message it shows.
//
// # Mapping
//
//	helix chunk (root agent)              UI message stream chunk
//
//	(response begins)                     start {messageId: runId, or the continued message's ID}
//	step_start                            start-step
//	text_delta                            text-start {id: "text-<seq>"} once, then text-delta
//	thinking (pieces)                     reasoning-start {id: "reasoning-<seq>"} once, reasoning-delta
//	thinking (complete)                   what the pieces lacked, then reasoning-end
//	tool_arg_stream_start / _delta        tool-input-start / tool-input-delta
//	tool_start (server tool)              tool-input-available {providerExecuted: true}
//	tool_start (client tool)              tool-input-available (no providerExecuted: useChat runs onToolCall)
//	tool_approval_request                 tool-approval-request {approvalId: "runId::toolCallId", toolCallId}
//	tool_end (success)                    tool-output-available {output}
//	tool_end (errorCode not_approved)     tool-output-denied
//	tool_end (error)                      tool-output-error {errorText: the tool's error; a generic text for code internal_error}
//	tool_input_error / tool_output_error  tool-input-error / tool-output-error
//	step_end                              finish-step
//	source_url / source_document / file   source-url / source-document / file
//	custom {eventName, data}              data-<eventName> {data}
//	error (the run failed)                error {errorText: Options.ErrorText, default the code only}
//	                                      (an internal_error's text is replaced before ErrorText sees it,
//	                                      as on package server's GET /sse)
//	output (agents with an OutputSchema)  data-output; a text agent's output is its final text, not repeated
//	stream_resync                         data-helix-resync (transient: onData only) {reason, fromSequence}
//	stream_end / run suspended / ended    text-end / reasoning-end for open parts, finish, data: [DONE]
//	tool_approval_response, state_patch, checkpoint and run bookkeeping   nothing
//
// Text and reasoning parts close before any other chunk, so parts keep the
// stream's order; their IDs derive from stream sequences, so a replay gives
// the same IDs.
//
// Sub-agents: subagent_start and subagent_end become one data-subagent part
// per call (id = the call's ID, data {callId, agentType, sessionId,
// status: running | completed, output}), updated in place. A sub-agent's
// own text, reasoning, steps and server tools stay inside it (its result
// reaches the parent's tool part), but its client-executed and
// approval-gated calls are shown as tool parts, because the user must
// answer them: submissions go to the root session, which routes them.
//
// # What the AI SDK client does (researched on ai 7.0.173, checked against 5 and 6)
//
// The client is the npm package "ai" (useChat in @ai-sdk/react wraps its
// AbstractChat). DefaultChatTransport POSTs {id, messages, trigger,
// messageId, ...body} to its api and parses the response with
// parseJsonEventStream + uiMessageChunkSchema (server-sent events whose
// data is one JSON chunk; "[DONE]" and comments are skipped, "id:" lines are
// ignored); processUIMessageStream folds the chunks into the assistant
// UIMessage (readUIMessageStream does the same outside a Chat). The
// response header X-Vercel-AI-UI-Message-Stream: v1 is what the SDK's own
// servers send (the client does not require it). A chunk the schema does
// not know fails the stream, so only chunk types both AI SDK 6 and 7 accept
// are written: tool-approval-response (7 only) and finishReason
// "interrupted" (7 only) are not. AI SDK 5 has no tool approvals: with it,
// approval-gated tools cannot be answered through useChat.
//
// Client-executed tools: tool-input-available without providerExecuted
// calls the Chat's onToolCall; addToolOutput (addToolResult before 6) puts
// the output on the tool part (state output-available, or output-error
// with errorText), and when sendAutomaticallyWhen holds
// (lastAssistantMessageIsCompleteWithToolCalls: every tool part of the last
// step without providerExecuted has an output) the Chat POSTs the whole
// history again with trigger submit-message and messageId = the assistant
// message, whose parts the continuation's chunks update in place.
//
// Approvals (AI SDK 6+): tool-approval-request needs the call's tool part
// (tool-input-available first) and sets state approval-requested with
// approval.id; addToolApprovalResponse({id, approved, reason}) sets
// approval-responded, and lastAssistantMessageIsCompleteWithApprovalResponses
// triggers the same continuation POST. tool-output-denied marks a denial.
// Server tools carry providerExecuted: true so that neither onToolCall nor
// lastAssistantMessageIsCompleteWithToolCalls waits for them.
//
// Reconnect: Chat.resumeStream (useChat's resume option) GETs
// {api}/{chatId}/stream; 204 means no active stream. AI SDK 7 assumes a
// replay (DefaultChatTransport resumeStreamIsReplay, default true) and
// resets the message at the first start chunk; a start chunk with another
// messageId starts a separate message.
package aisdk
