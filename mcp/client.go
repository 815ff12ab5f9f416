package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	helix "github.com/helix-agents/helix-dbos"
)

// IdempotencyKeyMeta is the _meta key under which Call sends a call's
// idempotency key: the same for every sending of one tool call of a run
// (helix.ToolContext.IdempotencyKey), so a server can recognise a call
// sent again after a crash and answer it without acting twice.
const IdempotencyKeyMeta = "helix-agents/idempotency-key"

// Client is a connection to one MCP server. It connects on first use, and
// again when a request finds the connection lost (at most
// Server.Reconnects times per request). It is safe for concurrent use.
type Client struct {
	server Server

	mu      sync.Mutex
	session *sdk.ClientSession
	closed  bool

	tokens   atomic.Int64
	progress sync.Map // progress token (string) -> func(Progress)
}

// NewClient returns a client of server s, which it validates; it does not
// connect yet.
func NewClient(s Server) (*Client, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &Client{server: s}, nil
}

// Server returns the server the client talks to.
func (c *Client) Server() Server { return c.server }

// Close closes the connection (and stops a stdio server). A closed client
// refuses further requests.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.session == nil {
		return nil
	}
	err := c.session.Close()
	c.session = nil
	return err
}

// errClosed is returned by the requests of a closed client.
var errClosed = errors.New("the MCP client is closed")

// connected returns the live session, opening one when there is none.
func (c *Client) connected(ctx context.Context) (*sdk.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if c.session != nil {
		return c.session, nil
	}
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.server.connectTimeout())
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "helix-dbos", Version: "1"},
		&sdk.ClientOptions{ProgressNotificationHandler: c.onProgress})
	cs, err := client.Connect(cctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	c.session = cs
	go func() {
		// The session ends when the server goes (a stdio server's exit, a
		// dropped HTTP session): the next request connects again.
		_ = cs.Wait()
		c.forget(cs)
	}()
	return cs, nil
}

// forget drops cs if it is still the client's session.
func (c *Client) forget(cs *sdk.ClientSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session == cs {
		c.session = nil
		_ = cs.Close()
	}
}

// transport returns how to reach the server.
func (c *Client) transport() (sdk.Transport, error) {
	s := c.server
	if s.Command != "" {
		cmd := exec.Command(s.Command, s.Args...)
		cmd.Env = append(os.Environ(), s.Env...)
		cmd.Dir = s.Dir
		cmd.Stderr = os.Stderr
		return &sdk.CommandTransport{Command: cmd}, nil
	}
	headers := http.Header{}
	for k, v := range s.Headers {
		headers.Set(k, v)
	}
	if s.BearerTokenEnv != "" {
		token := os.Getenv(s.BearerTokenEnv)
		if token == "" {
			return nil, fmt.Errorf("the environment variable %s (bearerTokenEnv) is unset or empty: set it to the server's token", s.BearerTokenEnv)
		}
		headers.Set("Authorization", "Bearer "+token)
	}
	return &sdk.StreamableClientTransport{Endpoint: s.URL, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: headerTransport{headers: headers, next: http.DefaultTransport}}}, nil
}

// headerTransport adds headers to every request.
type headerTransport struct {
	headers http.Header
	next    http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header[k] = v
	}
	return t.next.RoundTrip(r)
}

// lost reports whether err means the connection is gone.
func lost(err error) bool {
	return errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, sdk.ErrSessionMissing) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// failure wraps err of op with the server's name.
func (c *Client) failure(op string, err error) error {
	return fmt.Errorf("mcp server %q: %s: %w", c.server.Name, op, err)
}

// ListTools returns the server's tools (every page of them), named for the
// model (ToolName). A lost connection is opened again, at most
// Server.Reconnects times.
func (c *Client) ListTools(ctx context.Context) ([]ToolSpec, error) {
	var tools []*sdk.Tool
	err := c.retrying(ctx, func(cs *sdk.ClientSession) error {
		tools = tools[:0]
		cursor := ""
		for {
			res, err := cs.ListTools(ctx, &sdk.ListToolsParams{Cursor: cursor})
			if err != nil {
				return err
			}
			tools = append(tools, res.Tools...)
			if cursor = res.NextCursor; cursor == "" {
				return nil
			}
		}
	})
	if err != nil {
		return nil, c.failure("list tools", err)
	}
	return c.specs(tools)
}

// retrying runs op on a live session, connecting again when the connection
// was lost, at most Server.Reconnects times. Only for requests that are
// safe to send twice (a tool call is not).
func (c *Client) retrying(ctx context.Context, op func(*sdk.ClientSession) error) error {
	for attempt := 0; ; attempt++ {
		cs, err := c.connected(ctx)
		if err != nil {
			return err
		}
		err = op(cs)
		if err == nil || !lost(err) || attempt >= c.server.reconnects() {
			return err
		}
		c.forget(cs)
	}
}

// specs turns the server's tools into ToolSpecs, refusing a list whose
// names collide.
func (c *Client) specs(tools []*sdk.Tool) ([]ToolSpec, error) {
	out := make([]ToolSpec, 0, len(tools))
	seen := map[string]string{}
	for _, t := range tools {
		spec := ToolSpec{Name: ToolName(c.server.Name, t.Name), Source: c.server.Name, Remote: t.Name,
			Description: t.Description, NeedsApproval: c.server.NeedsApproval(t.Name)}
		if other, dup := seen[spec.Name]; dup {
			return nil, fmt.Errorf("mcp server %q: tools %q and %q both become %q for the model: rename one on the server",
				c.server.Name, other, t.Name, spec.Name)
		}
		seen[spec.Name] = t.Name
		if err := helix.ValidateToolName(spec.Name); err != nil {
			return nil, fmt.Errorf("mcp server %q: tool %q: %w", c.server.Name, t.Name, err)
		}
		var err error
		if spec.InputSchema, err = schemaJSON(t.InputSchema, `{"type":"object"}`); err != nil {
			return nil, fmt.Errorf("mcp server %q: tool %q: input schema: %w", c.server.Name, t.Name, err)
		}
		if spec.OutputSchema, err = schemaJSON(t.OutputSchema, ""); err != nil {
			return nil, fmt.Errorf("mcp server %q: tool %q: output schema: %w", c.server.Name, t.Name, err)
		}
		out = append(out, spec)
	}
	return out, nil
}

// schemaJSON returns schema (any JSON value the SDK decoded) as JSON, or
// empty ("" for none) when there is none.
func schemaJSON(schema any, empty string) (json.RawMessage, error) {
	if schema == nil {
		if empty == "" {
			return nil, nil
		}
		return json.RawMessage(empty), nil
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	if string(b) == "null" {
		return schemaJSON(nil, empty)
	}
	return b, nil
}

// Progress is a progress notification of a call in flight.
type Progress struct {
	Progress float64 `json:"progress"`
	Total    float64 `json:"total,omitempty"`
	Message  string  `json:"message,omitempty"`
}

// CallOptions are a call's options.
type CallOptions struct {
	// IdempotencyKey goes in the request's _meta (IdempotencyKeyMeta).
	IdempotencyKey string
	// Progress, when set, receives the server's progress notifications of
	// the call that arrive before its result (the SDK may hand one sent
	// just before the result over after it: such a late one is dropped).
	Progress func(Progress)
}

// CallError is a call that did not give a result: the server marked its
// result isError (ToolError true: the tool ran and failed, Message is its
// text), or the call could not be made or did not finish (a timeout, a
// lost connection, a dead server: Err is the cause).
type CallError struct {
	Server, Tool string
	ToolError    bool
	Message      string
	Err          error
}

func (e *CallError) Error() string {
	if e.ToolError {
		return fmt.Sprintf("tool %q of MCP server %q failed: %s", e.Tool, e.Server, e.Message)
	}
	return fmt.Sprintf("MCP server %q: call of tool %q: %s", e.Server, e.Tool, e.Message)
}

func (e *CallError) Unwrap() error { return e.Err }

// Call calls the server's tool remote with args (a JSON object; empty for
// none) and returns its result as JSON: the structured result when the
// server gives one, the text when it is one text, else the content list.
// It is sent at most once: a connection found lost before the call is
// opened again, one lost while the call is in flight is an error (the call
// may have run; sending it again is the caller's decision, with the same
// idempotency key). The call is bounded by Server.CallTimeout and by ctx.
func (c *Client) Call(ctx context.Context, remote string, args json.RawMessage, o CallOptions) (json.RawMessage, error) {
	fail := func(msg string, err error) error {
		return &CallError{Server: c.server.Name, Tool: remote, Message: msg, Err: err}
	}
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	params := &sdk.CallToolParams{Name: remote, Arguments: args}
	if o.IdempotencyKey != "" {
		params.Meta = sdk.Meta{IdempotencyKeyMeta: o.IdempotencyKey}
	}
	if o.Progress != nil {
		token := c.server.Name + "-" + strconv.FormatInt(c.tokens.Add(1), 10)
		c.progress.Store(token, o.Progress)
		defer c.progress.Delete(token)
		params.SetProgressToken(token)
	}
	cctx, cancel := context.WithTimeout(ctx, c.server.callTimeout())
	defer cancel()
	cs, err := c.connected(cctx)
	if err != nil {
		return nil, fail("the server could not be reached: "+err.Error(), err)
	}
	res, err := cs.CallTool(cctx, params)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, fail("cancelled: "+ctx.Err().Error(), ctx.Err())
	case cctx.Err() != nil:
		return nil, fail(fmt.Sprintf("no answer within %s (the server's callTimeout)", c.server.callTimeout()), cctx.Err())
	case lost(err):
		c.forget(cs)
		return nil, fail("the connection was lost during the call (it may have run: a call sent again carries the same idempotency key): "+err.Error(), err)
	default:
		return nil, fail(err.Error(), err)
	}
	if res.IsError {
		return nil, &CallError{Server: c.server.Name, Tool: remote, ToolError: true, Message: contentText(res.Content)}
	}
	return resultJSON(res)
}

// contentText joins a result's text contents (and names the others).
func contentText(content []sdk.Content) string {
	var parts []string
	for _, c := range content {
		if t, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, t.Text)
			continue
		}
		parts = append(parts, fmt.Sprintf("[%T]", c))
	}
	if len(parts) == 0 {
		return "(no message)"
	}
	return strings.Join(parts, "\n")
}

// resultJSON returns a successful result as the tool's output.
func resultJSON(res *sdk.CallToolResult) (json.RawMessage, error) {
	if res.StructuredContent != nil {
		return json.Marshal(res.StructuredContent)
	}
	if len(res.Content) == 1 {
		if t, ok := res.Content[0].(*sdk.TextContent); ok {
			return json.Marshal(t.Text)
		}
	}
	if res.Content == nil {
		return json.RawMessage(`[]`), nil
	}
	return json.Marshal(res.Content)
}

// onProgress hands a progress notification to its call's callback.
func (c *Client) onProgress(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	token, ok := req.Params.ProgressToken.(string)
	if !ok {
		return
	}
	if f, ok := c.progress.Load(token); ok {
		f.(func(Progress))(Progress{Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message})
	}
}

// SourceName implements helix.ToolSource: the server's name.
func (c *Client) SourceName() string { return c.server.Name }

// ListSourceTools implements helix.ToolSource: ListTools.
func (c *Client) ListSourceTools(ctx context.Context) ([]helix.SourceTool, error) {
	return c.ListTools(ctx)
}

// ProgressEvent is the custom event (a `custom` chunk of the session's
// stream) that carries a call's progress notifications, with a
// ProgressData.
const ProgressEvent = "mcp_progress"

// ProgressData is a ProgressEvent's data.
type ProgressData struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	Progress
}

// CallSourceTool implements helix.ToolSource: Call with the call's
// idempotency key, its progress notifications emitted to the session's
// stream as ProgressEvent events.
func (c *Client) CallSourceTool(ctx context.Context, remote string, args json.RawMessage, tc helix.ToolContext) (json.RawMessage, error) {
	return c.Call(ctx, remote, args, CallOptions{IdempotencyKey: tc.IdempotencyKey(), Progress: func(p Progress) {
		if err := tc.Emit(ProgressEvent, ProgressData{Server: c.server.Name, Tool: remote, Progress: p}); err != nil {
			_ = err // the stream refuses events once the call's step ended: progress is advisory
		}
	}})
}

var _ helix.ToolSource = (*Client)(nil)
