package workflows

import "strings"

// Journal outputs are stored with their frequent keys coded (issue 15: a
// step's records spelled "toolCallId", "messageCount" and their like in
// full on every step): `"result":` is stored as `"<a":`. json.Marshal never
// writes a raw '<' (it escapes it as \u003c in strings, keys and
// json.RawMessage values alike), so a coded key is never confused with a
// written one; a coded output is still JSON; and an output written before
// coding (it has no `"<`) reads as it is. Only whole keys are coded (a key
// is the only place a quote-delimited word is followed by a colon), the
// keys of user data inside an output included: the mapping is exact both
// ways whatever the key belongs to.
//
// journalKeys is part of the stored format: append only, never reorder.
// Migration 00022's helix.journal_output expands the same table in SQL, for
// helix.step_journal_records.
var journalKeys = []string{
	"result", "type", "content", "toolCalls", "id", "name", "arguments", "stopReason",
	"usage", "inputTokens", "outputTokens", "cachedTokens", "cacheWriteTokens", "durationMs",
	"messageCount", "toolCallId", "toolName", "error", "errorCode", "checkpointId",
	"failure", "output", "model", "thinking", "patches", "recorded", "denied", "finishWith",
	"interrupted", "continued", "inbox", "role",
}

// journalCodeChars are the codes' second characters, in journalKeys' order.
const journalCodeChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

var journalCoder, journalExpander = func() (*strings.Replacer, *strings.Replacer) {
	if len(journalKeys) > len(journalCodeChars) {
		panic("workflows: more journal keys than codes")
	}
	var code, expand []string
	for i, k := range journalKeys {
		full, short := `"`+k+`":`, `"<`+journalCodeChars[i:i+1]+`":`
		code, expand = append(code, full, short), append(expand, short, full)
	}
	return strings.NewReplacer(code...), strings.NewReplacer(expand...)
}()

// codeOutput codes the keys of a step's output as json.Marshal wrote it.
func codeOutput(s string) string { return journalCoder.Replace(s) }

// expandOutput returns a stored output as json.Marshal wrote it.
func expandOutput(s string) string {
	if !strings.Contains(s, `"<`) {
		return s
	}
	return journalExpander.Replace(s)
}
