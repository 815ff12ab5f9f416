// Package mcp takes an agent's tools from MCP (Model Context Protocol)
// servers, on the official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// A [Server] describes one server: a command to run over stdio, or a URL
// to reach over streamable HTTP (with headers and a bearer token read
// from the environment). A [Client] holds the connection to it, opening it
// on first use and again after it was lost (a bounded number of times per
// request), and offers the two operations a durable engine needs:
//
//   - [Client.ListTools] returns the server's tools as [ToolSpec] values,
//     each named for model providers ("{server}__{tool}", at most 64
//     characters of [a-zA-Z0-9_-], unique within the server) with its
//     input and output JSON Schemas;
//   - [Client.Call] calls one of them with the arguments the model gave,
//     sending the call's idempotency key in the request's _meta (under
//     [IdempotencyKeyMeta]) so that a server can recognise a call sent
//     again after a crash; a result the server marks isError, a timeout, a
//     lost connection and a dead stdio server come back as errors that say
//     which server and tool failed, never as a call that does not return.
//
// The engine records the tool list of a run and each call's result as
// durable steps: a replay sees the tools the model saw and never sends a
// recorded call again.
package mcp
