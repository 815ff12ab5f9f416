package anthropic_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/llm/anthropic"
	"github.com/helix-agents/helix-dbos/llm/llmtest"
)

// step is one piece of a scripted response: a wait, then an event.
type step struct {
	wait  time.Duration
	event string
}

// scriptedTransport answers every request with a 200 event stream that
// writes the steps in the fake time of a synctest bubble. Like a real
// transport it breaks a pending read of the body when the request's
// context ends (the idle watchdog cancels it).
type scriptedTransport struct{ steps []step }

func (s scriptedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { pw.CloseWithError(context.Cause(ctx)) })
	go func() {
		defer stop()
		for _, st := range s.steps {
			select {
			case <-time.After(st.wait):
			case <-ctx.Done():
				return
			}
			if _, err := io.WriteString(pw, st.event); err != nil {
				return
			}
		}
		_ = pw.Close()
	}()
	return &http.Response{
		StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: pr, Request: req,
	}, nil
}

const (
	evStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"
	evText  = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
	evPing = "event: ping\ndata: {\"type\": \"ping\"}\n\n"
	evStop = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func scripted(t *testing.T, idle time.Duration, steps ...step) *anthropic.Model {
	t.Helper()
	m, err := anthropic.New(anthropic.Config{
		BaseURL: "http://anthropic.invalid", APIKey: testKey, Model: "claude-x", IdleTimeout: idle,
		HTTPClient: &http.Client{Transport: scriptedTransport{steps}}, MaxRetries: -1,
	})
	require.NoError(t, err)
	return m
}

// The API sends ping events while the model works: they keep a slow
// stream alive however long it lasts, each one restarting the idle
// countdown.
func TestIdleTimeoutPingsKeepTheStreamAlive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		steps := []step{{0, evStart}}
		for range 6 {
			steps = append(steps, step{90 * time.Second, evPing})
		}
		steps = append(steps, step{90 * time.Second, evText}, step{0, evStop})
		m := scripted(t, 2*time.Minute, steps...)
		start := time.Now()
		res, err := m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
		require.NoError(t, err)
		require.Equal(t, "Hi", res.Content)
		require.Equal(t, 10*time.Minute+30*time.Second, time.Since(start))
	})
}

// A stream that goes silent is abandoned after IdleTimeout: a recoverable
// provider_timeout that says what happened and what to set, not retried
// once output went out.
func TestIdleTimeoutStalledStream(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := scripted(t, 0, step{0, evStart}, step{time.Second, evText}, step{time.Hour, evStop})
		start := time.Now()
		rec := llmtest.NewRecorder()
		_, err := m.GenerateStep(t.Context(), userRequest(), rec.Callbacks())
		me := llmtest.AsModelError(t, err)
		require.Equal(t, helix.CodeProviderTimeout, me.Code)
		require.True(t, me.Recoverable)
		require.True(t, strings.HasPrefix(me.Message, "anthropic: the response sent nothing for 5m0s (Config.IdleTimeout)"), me.Message)
		require.Equal(t, time.Second+anthropic.DefaultIdleTimeout, time.Since(start), "the default idle timeout, from the last event")
		require.Equal(t, "Hi", rec.Text())
	})
}

// A negative IdleTimeout turns the watchdog off: an hour of silence is
// waited out.
func TestIdleTimeoutDisabled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := scripted(t, -1, step{0, evStart}, step{0, evText}, step{time.Hour, evStop})
		res, err := m.GenerateStep(t.Context(), userRequest(), helix.StreamCallbacks{})
		require.NoError(t, err)
		require.Equal(t, "Hi", res.Content)
	})
}
