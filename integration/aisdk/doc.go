// Package aisdk is the end-to-end test of the AI SDK chat routes
// (server/aisdk) with the real client: a Node script (node/chat.mjs, the
// npm "ai" package pinned in node/package.json and package-lock.json) drives
// the routes with the package's own Chat, DefaultChatTransport and
// readUIMessageStream, and the Go test asserts on the messages it
// reconstructs. See aisdk_test.go for what it proves and how Node is found.
package aisdk
