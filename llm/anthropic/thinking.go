package anthropic

import (
	"encoding/json"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go"

	helix "github.com/helix-agents/helix-dbos"
)

// thoughtsPrefix starts a helix.Thinking.Signature that carries several
// thinking blocks (see encodeThoughts) rather than one block's signature.
// The API's signatures are base64 and never contain a colon.
const thoughtsPrefix = "helix-anthropic-thinking-blocks-v1:"

// wireThought is a thinking or redacted_thinking block as the Messages API
// takes it back.
type wireThought struct {
	Type      string `json:"type"`
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	Data      string `json:"data,omitempty"`
}

// encodeThoughts returns the Signature of a step with several thinking
// blocks or a redacted_thinking one: thoughtsPrefix, then the blocks as a
// JSON array of the API's own block objects. It is opaque to everything
// but this adapter, as a signature is; the reasoning to show is in
// Thinking.Content.
func encodeThoughts(thoughts []*thought) string {
	blocks := make([]wireThought, len(thoughts))
	for i, th := range thoughts {
		if th.redacted {
			blocks[i] = wireThought{Type: blockRedactedThinking, Data: th.data}
		} else {
			blocks[i] = wireThought{Type: blockThinking, Thinking: th.text.String(), Signature: th.signature}
		}
	}
	b, err := json.Marshal(blocks)
	if err != nil {
		// Strings only: it cannot fail. Were it to, the reasoning would
		// not go back, which the API accepts more often than a bad block.
		return ""
	}
	return thoughtsPrefix + string(b)
}

// thinkingBlocks returns the blocks that send th back, first in its
// assistant turn, or none. The API verifies every thinking block against
// its signature and rejects the turn for good when one does not match,
// so only blocks it signed go back:
//
//   - a Signature from encodeThoughts: every block it holds, in order,
//     the redacted ones included; none when it cannot be read or a
//     thinking block in it has no signature (one bad block fails the
//     turn);
//   - another non-empty Signature: one thinking block of Content with it;
//   - no Signature (reasoning from another provider, say): none.
func thinkingBlocks(th *helix.Thinking) []sdk.ContentBlockParamUnion {
	if th == nil || th.Signature == "" {
		return nil
	}
	raw, ok := strings.CutPrefix(th.Signature, thoughtsPrefix)
	if !ok {
		return []sdk.ContentBlockParamUnion{sdk.NewThinkingBlock(th.Signature, th.Content)}
	}
	var blocks []wireThought
	if json.Unmarshal([]byte(raw), &blocks) != nil {
		return nil
	}
	out := make([]sdk.ContentBlockParamUnion, 0, len(blocks))
	for _, b := range blocks {
		switch {
		case b.Type == blockThinking && b.Signature != "":
			out = append(out, sdk.NewThinkingBlock(b.Signature, b.Thinking))
		case b.Type == blockRedactedThinking && b.Data != "":
			out = append(out, sdk.NewRedactedThinkingBlock(b.Data))
		default:
			return nil
		}
	}
	return out
}
