package aisdk_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/internal/aisdktest"
	"github.com/helix-agents/helix-dbos/store"
)

// The AI SDK chat routes, driven by the npm "ai" package's own client.
//
// node/chat.mjs runs AbstractChat (what useChat wraps) over
// DefaultChatTransport against an engine and the chat handler on a test
// server, and readUIMessageStream where it reads raw streams, then prints
// what the client reconstructed. This test asserts on it:
//
//	a   one message: text, a server tool part with its output; a follow-up turn
//	b   a client-executed tool: onToolCall, addToolOutput, the automatic
//	    continuation through POST /chat, the text that uses the output
//	c   an approval-gated tool: the approval request, addToolApprovalResponse,
//	    the tool's output and the final text
//	c2  a denial through POST /chat/{id}/submit-tool-result, then a reconnect
//	    from the message's sequence (resumeStreamIsReplay: false)
//	d1  useChat-style resume: stop mid-answer, resumeStream replays into the
//	    same message, nothing duplicated
//	d2  resume from a sequence: raw SSE up to an id, X-Resume-From-Sequence,
//	    readUIMessageStream continues the partial message exactly
//	e   every golden stream of server/aisdk's translator tests goes through
//	    the client's parser (uiMessageChunkSchema) and message builder
//
// Node (20 or later) and npm must be on PATH; without them the test fails
// and says what to install (the promise it proves cannot be checked
// otherwise). (ai 7 declares
// Node >= 22; every client path used here runs on Node 20, and
// node/.npmrc keeps npm's engine-strict off.) node_modules is installed with
// `npm ci` from the pinned lock file, once per lock file (npm's cache
// serves later installs).
func TestAISDKClient(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	dir := npmCI(t)

	transfers := new(atomic.Int32)
	eng, srv := aisdktest.NewServer(t, aisdktest.WeatherAgent(), aisdktest.AskerAgent(), aisdktest.BankerAgent(transfers),
		aisdktest.SlowAgent(slowDeltas, 100*time.Millisecond))

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel) // not defer: the parallel subtests below outlive this function (tparallel)
	golden, err := filepath.Abs(filepath.Join("..", "..", "server", "aisdk", "testdata"))
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, node, "chat.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HELIX_CHAT_URL="+srv.URL+"/chat", "HELIX_GOLDEN_DIR="+golden, "NODE_NO_WARNINGS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err = cmd.Run()
	t.Logf("node chat.mjs ran in %s", time.Since(began).Round(time.Millisecond))
	require.NoError(t, err, "node chat.mjs failed:\n%s", stderr.String())
	if os.Getenv("HELIX_AISDK_DUMP") == "1" {
		t.Logf("summary: %s", stdout.String())
	}
	var s summary
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &s), "stdout: %s\nstderr: %s", stdout.String(), stderr.String())

	t.Run("a_text_and_server_tool", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "ready", s.A.Status)
		require.Empty(t, s.A.Errors)
		require.Len(t, s.A.Messages, 4, "user, assistant, user, assistant")
		runs, err := eng.Runs(t.Context(), "node-a")
		require.NoError(t, err)
		require.Len(t, runs, 2, "the follow-up continued the session")
		first := s.A.First
		require.Equal(t, runs[0].RunID, first.ID, "the assistant message is the run")
		require.Equal(t, "assistant", first.Role)
		require.Equal(t, []string{"step-start", "text", "tool-get_weather", "step-start", "text"}, first.types())
		tool := first.Parts[2]
		require.Equal(t, "output-available", tool.State)
		require.Equal(t, "w1", tool.ToolCallID)
		require.JSONEq(t, `{"city":"Paris"}`, string(tool.Input))
		require.JSONEq(t, `{"forecast":"sunny in Paris"}`, string(tool.Output))
		require.Equal(t, `Let me check.It is {"forecast":"sunny in Paris"}`, first.text())
		require.Equal(t, "done", first.Parts[4].State)
		require.Equal(t, "You are welcome.", s.A.Messages[3].text())
		var md struct {
			Helix map[string]any `json:"helix"`
		}
		require.NoError(t, json.Unmarshal(first.Metadata, &md))
		require.Equal(t, "completed", md.Helix["status"])
		require.Equal(t, "node-a", md.Helix["sessionId"])
	})

	t.Run("b_client_tool", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "ready", s.B.Status)
		require.Empty(t, s.B.Errors)
		require.Len(t, s.B.ToolCalls, 1, "onToolCall ran once, for the client tool only")
		require.Equal(t, "ask_user", s.B.ToolCalls[0].ToolName)
		require.JSONEq(t, `{"question":"favourite colour?"}`, string(s.B.ToolCalls[0].Input))
		require.Equal(t, []request{
			{Method: "POST", Path: "/chat", Status: 200, LastRole: "user"},
			{Method: "POST", Path: "/chat", Status: 200, LastRole: "assistant"},
		}, s.B.Requests, "the tool output went back through the chat route")
		require.Len(t, s.B.Messages, 2, "the continuation wrote into the same assistant message")
		m := s.B.Messages[1]
		require.Equal(t, []string{"step-start", "tool-ask_user", "step-start", "text"}, m.types())
		require.Equal(t, "output-available", m.Parts[1].State)
		require.JSONEq(t, `{"answer":"blue"}`, string(m.Parts[1].Output))
		require.Equal(t, `You said {"answer":"blue"}`, m.text())
		msgs, err := eng.Messages(t.Context(), "node-b", &store.GetMessagesOptions{Limit: 10})
		require.NoError(t, err)
		require.Equal(t, helix.RoleTool, msgs.Messages[2].Role)
		require.JSONEq(t, `{"answer":"blue"}`, msgs.Messages[2].Content, "the client's output is the tool result the model read")
	})

	t.Run("c_approval", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "ready", s.C.Status)
		require.Empty(t, s.C.Errors)
		req := s.C.Requested.Parts[len(s.C.Requested.Parts)-1]
		require.Equal(t, "tool-transfer", req.Type)
		require.Equal(t, "approval-requested", req.State)
		require.Equal(t, s.C.Requested.ID+"::t1", req.Approval.ID, "the approval ID is runId::toolCallId")
		require.Equal(t, []request{
			{Method: "POST", Path: "/chat", Status: 200, LastRole: "user"},
			{Method: "POST", Path: "/chat", Status: 200, LastRole: "assistant"},
		}, s.C.Requests)
		require.Len(t, s.C.Messages, 2)
		m := s.C.Messages[1]
		require.Equal(t, []string{"step-start", "text", "tool-transfer", "step-start", "text"}, m.types())
		tool := m.Parts[2]
		require.Equal(t, "output-available", tool.State)
		require.JSONEq(t, `{"sent":5,"to":"bob"}`, string(tool.Output))
		require.True(t, *tool.Approval.Approved)
		require.Equal(t, `I will transfer.Result: {"sent":5,"to":"bob"}`, m.text())
		require.Equal(t, int32(1), transfers.Load(), "the approved tool ran once")
	})

	t.Run("c2_denial_through_submit_route", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "ready", s.C2.Status, "%v", s.C2.Errors)
		require.Empty(t, s.C2.Errors)
		require.Equal(t, "t1", s.C2.Submitted.ToolCallID)
		require.False(t, s.C2.Submitted.AlreadyCompleted)
		require.Equal(t, []request{{Method: "GET", Path: "/chat/node-c2/stream", Status: 200}}, s.C2.Requests)
		require.Len(t, s.C2.Messages, 2, "the reconnect continued the message")
		m := s.C2.Messages[1]
		require.Equal(t, []string{"step-start", "text", "tool-transfer", "step-start", "text"}, m.types())
		require.Equal(t, "output-denied", m.Parts[2].State)
		require.Equal(t, `I will transfer.Result: {"error":"`+helix.NotApprovedMessage+`"}`, m.text(), "the model read the denial")
		require.Equal(t, int32(1), transfers.Load(), "the denied call never ran (the count is c's approved call)")
	})

	full := strings.Join(slowDeltas, "")
	t.Run("d1_resume_replay", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "ready", s.D1.Status)
		require.Empty(t, s.D1.Errors)
		require.NotEmpty(t, s.D1.Partial)
		require.Less(t, len(s.D1.Partial), len(full), "the first response was cut mid-answer")
		require.True(t, strings.HasPrefix(full, s.D1.Partial))
		require.Equal(t, []request{{Method: "GET", Path: "/chat/node-d1/stream", Status: 200}}, s.D1.Requests)
		require.Len(t, s.D1.Messages, 2, "the replay rebuilt the same message")
		m := s.D1.Messages[1]
		require.Equal(t, []string{"step-start", "text"}, m.types(), "no duplicated part")
		require.Equal(t, full, m.text())
	})

	t.Run("d2_resume_from_sequence", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, s.D2.Errors)
		require.Positive(t, s.D2.LastID)
		partial := s.D2.Partial.text()
		require.NotEmpty(t, partial)
		require.Less(t, len(partial), len(full))
		require.Equal(t, s.D2.Partial.ID, s.D2.Final.ID)
		require.Equal(t, full, s.D2.Final.text(), "the rest continues exactly where the client stopped")
		require.Equal(t, []string{"step-start", "text", "text"}, s.D2.Final.types(), "the open text part continues in a new one")
	})

	t.Run("e_golden_streams", func(t *testing.T) {
		t.Parallel()
		require.Len(t, s.Golden, 8)
		for name, g := range s.Golden {
			require.Empty(t, g.StreamErrors, name)
			require.NotNil(t, g.Message, name)
			if name == "misc.jsonl" {
				require.Equal(t, []string{"The agent failed (provider_rate_limited).", "The agent failed."}, g.Errors)
				continue
			}
			require.Empty(t, g.Errors, name)
		}
		require.Equal(t, []string{"step-start", "text", "tool-transfer", "tool-transfer"}, s.Golden["approvals.jsonl"].Message.types())
		require.Equal(t, "output-available", s.Golden["approvals.jsonl"].Message.Parts[2].State)
		require.Equal(t, "output-denied", s.Golden["approvals.jsonl"].Message.Parts[3].State)
		sub := s.Golden["subagent.jsonl"].Message
		require.Equal(t, []string{"step-start", "tool-subagent__checker", "data-subagent", "tool-ask_user", "tool-publish"}, sub.types())
		require.JSONEq(t, `{"callId":"call-9","agentType":"checker","sessionId":"sess-1-sub-call-9","status":"completed","output":{"verdict":"ok"}}`,
			string(sub.Parts[2].Data), "the data part was updated in place")
		require.Equal(t, []string{"step-start", "reasoning", "text", "reasoning", "tool-get_weather"}, s.Golden["reasoning_and_tool_args.jsonl"].Message.types())
		require.Equal(t, "The user wants weather.", s.Golden["reasoning_and_tool_args.jsonl"].Message.Parts[1].Text)
	})
}

// summary is what node/chat.mjs prints.
type summary struct {
	A struct {
		chat
		First message `json:"first"`
	} `json:"a"`
	B struct {
		chat
		ToolCalls []toolCall `json:"toolCalls"`
	} `json:"b"`
	C struct {
		chat
		Requested message `json:"requested"`
	} `json:"c"`
	C2 struct {
		chat
		Submitted helix.SubmitResult `json:"submitted"`
	} `json:"c2"`
	D1 struct {
		chat
		Partial string `json:"partial"`
	} `json:"d1"`
	D2 struct {
		LastID  int64    `json:"lastId"`
		Partial message  `json:"partial"`
		Final   message  `json:"final"`
		Errors  []string `json:"errors"`
	} `json:"d2"`
	Golden   map[string]golden `json:"golden"`
	Requests []request         `json:"requests"`
}

// chat is what the script reports of one of its Chats: its status at the
// end, the errors onError received, the requests its transport made (the
// script leaves them out where the case does not check them) and the
// messages it holds.
type chat struct {
	Status   string    `json:"status"`
	Errors   []string  `json:"errors"`
	Requests []request `json:"requests"`
	Messages []message `json:"messages"`
}

type toolCall struct {
	ToolName   string          `json:"toolName"`
	ToolCallID string          `json:"toolCallId"`
	Input      json.RawMessage `json:"input"`
}

type golden struct {
	Chunks       int      `json:"chunks"`
	Errors       []string `json:"errors"`
	StreamErrors []string `json:"streamErrors"`
	Message      *message `json:"message"`
}

type request struct {
	Method   string `json:"method"`
	Path     string `json:"path"`
	Status   int    `json:"status"`
	LastRole string `json:"lastRole,omitempty"`
}

type message struct {
	ID       string          `json:"id"`
	Role     string          `json:"role"`
	Parts    []part          `json:"parts"`
	Metadata json.RawMessage `json:"metadata"`
}

type part struct {
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	State            string          `json:"state"`
	ToolCallID       string          `json:"toolCallId"`
	Input            json.RawMessage `json:"input"`
	Output           json.RawMessage `json:"output"`
	ErrorText        string          `json:"errorText"`
	ProviderExecuted *bool           `json:"providerExecuted"`
	Data             json.RawMessage `json:"data"`
	Approval         *approval       `json:"approval"`
}

type approval struct {
	ID       string `json:"id"`
	Approved *bool  `json:"approved"`
	Reason   string `json:"reason"`
}

func (m message) types() []string {
	out := make([]string, len(m.Parts))
	for i, p := range m.Parts {
		out[i] = p.Type
	}
	return out
}

func (m message) text() string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// slowDeltas are the slow agent's answer, one delta per 100 ms: long
// enough for the script to cut the response and reconnect mid-answer.
var slowDeltas = []string{"One ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight ",
	"nine ", "ten ", "eleven ", "twelve ", "thirteen ", "fourteen ", "fifteen."}

// requireNode returns the node binary, or fails the test when node or npm
// is missing or too old.
func requireNode(t *testing.T) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Fatalf("%s: the AI SDK client test needs Node 20 or later and npm on PATH (Debian: apt-get install nodejs npm)",
			fmt.Sprintf(format, args...))
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		missing("npm is not on PATH")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		missing("node --version failed: %v", err)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if major < 20 {
		missing("node %s is too old (the test needs 20 or later)", v)
	}
	return node
}

// npmCI installs node/'s pinned dependencies with npm ci, unless the
// installed tree already matches package-lock.json (a stamp in
// node_modules records the lock file's hash), and returns the directory.
func npmCI(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("node")
	require.NoError(t, err)
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	require.NoError(t, err)
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join(dir, "node_modules", ".helix-lock-sha256")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return dir
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--prefer-offline")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm ci failed:\n%s", out)
	t.Logf("npm ci took %s", time.Since(began).Round(time.Millisecond))
	require.NoError(t, os.WriteFile(stamp, []byte(want), 0o644))
	return dir
}
