// Package scripted provides a deterministic [helix.Model] for tests, demos
// and benchmarks. A [Model] plays a script of steps, each the model's whole
// answer to one request: text (streamed as deltas, optionally paced),
// thinking, tool calls, a structured output, or an error. A script is built
// from Go values ([New], [NewKeyed], [Repeat]), computed ([Generate]) or
// read from a JSON or YAML file ([Load], [Parse]).
//
// The model fails loudly rather than improvise: a request past the end of
// the script ([ErrScriptExhausted]), from an agent type without a script
// ([ErrUnknownAgent]) or not matching a step's [Expect]
// ([ErrUnexpectedRequest]) returns an error naming the agent type, the step
// index and what differed. Those errors also match *helix.ModelError
// (code model_error, not recoverable), so the engine ends the run with a
// classified error instead of retrying.
//
// # Position in the script
//
// The model keeps no state between calls. The engine calls it inside a
// durable step that is executed again after a crash, in a new process with
// a new Model value, so an in-memory counter would skip or repeat steps.
// Instead, the step a request plays is [Position] of its messages: the
// number of assistant messages in ModelRequest.Messages, counted from 0.
// Every completed step of a session appends exactly one assistant message,
// so:
//
//   - a request with k assistant messages plays step k, and calling
//     GenerateStep twice with the same request gives the same result;
//   - the count continues across turns: a second turn of a session goes on
//     where the first one stopped, so script a multi-turn session as one
//     list of steps;
//   - assistant messages the caller supplies (a seeded history) count too;
//   - each session starts at step 0 of its agent type's script, so every
//     sub-agent session of the same type plays the same script;
//   - a failed step (an Error step, or an error of the script) appends no
//     assistant message: the same request fails the same way again.
//
// Default tool call IDs derive from the position too ([CallID]:
// "call-<step>-<i>"), so they are unique within a session and identical
// when a step is replayed.
//
// # Keyed scripts
//
// [New] plays one script for every agent type. [NewKeyed] (or agents in a
// file) keys the scripts on ModelRequest.AgentType, so a parent agent and
// its sub-agents each follow their own script; an unknown agent type fails
// with the list of the scripted ones.
//
// # Structured output
//
// Step.Output is played as a call to the __finish__ tool
// ([helix.FinishToolName]) with the output as its arguments, after the
// step's other tool calls: that is how the engine receives structured
// output, and it validates the output against the agent's schema as it
// would a real model's.
//
// # File format
//
// A script file is JSON or YAML with the same shape. Its top level has
// exactly one of:
//
//   - steps: a list of steps, played for every agent type (like [New]);
//   - agents: a mapping from agent type to its list of steps (like
//     [NewKeyed]).
//
// A step has the fields of [Step], camelCased, all optional except as
// noted:
//
//	text            string    assistant text, streamed word by word
//	deltas          [string]  the exact deltas (their concatenation is the text)
//	deltaDelay      duration  pause between deltas, a Go duration string: "20ms"
//	thinking        string    reasoning content
//	toolCalls       [call]    tool calls: {id (default call-<step>-<i>), name (required), args (an object)}
//	output          object    structured output, played as a __finish__ call
//	streamToolArgs  bool      stream the calls' arguments as tool_arg chunks
//	error           object    {message (required), code (default model_error), recoverable, statusCode}
//	usage           object    {inputTokens, outputTokens, cachedTokens, cacheWriteTokens}
//	stopReason      string    end_turn, tool_use, max_tokens, ... (default tool_use with calls, else end_turn)
//	expect          object    {lastRole, lastMessageContains, toolResultFor, hasTools}
//
// Unknown fields are rejected, as are invalid steps (an error step with
// content, a call without a name, arguments that are not an object, ...),
// with an error naming the agent type, the step index (and, for YAML, the
// line) and the field. An example, testdata/research.yaml:
//
//	agents:
//	  researcher:
//	    - thinking: Two sources will do.
//	      text: Let me search the web and the docs.
//	      deltaDelay: 20ms
//	      toolCalls:
//	        - name: search_web
//	          args: {query: durable execution}
//	        - name: search_docs
//	          args: {query: workflow recovery}
//	    - expect: {lastRole: tool, toolResultFor: search_docs}
//	      text: Both agree; writing it up.
//	      output: {answer: Checkpoint every step., confidence: 0.9}
//
// # Import rule
//
// This package imports only helix, the standard library and a YAML parser
// (go.yaml.in/yaml/v3). It must never import engine, store or DBOS.
package scripted
