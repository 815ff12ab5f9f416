package workflows

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/helix-agents/helix-dbos/steps"
)

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
// helix.journal_output expands the same table in SQL, for
// helix.step_journal_records.
var journalKeys = []string{
	"result", "type", "content", "toolCalls", "id", "name", "arguments", "stopReason",
	"usage", "inputTokens", "outputTokens", "cachedTokens", "cacheWriteTokens", "durationMs",
	"messageCount", "toolCallId", "toolName", "error", "errorCode", "checkpointId",
	"failure", "output", "model", "thinking", "patches", "recorded", "denied", "finishWith",
	"interrupted", "continued", "inbox", "role",
	"agentType", "turn", "pending", "kind", "index", "step", "createdAt", "deadlineAt",
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

// journalStepNames are the step names a checkpoint's journal
// (checkpointRecords) stores as their index, a small JSON
// integer: the names the engine writes
// into checkpoint journals, the most frequent first. Any other name is
// stored as its string, so the two never meet: an entry's name is a
// string or a number.
//
// journalStepNames is part of the stored format: append only, never
// reorder. helix.journal_step_name expands the same
// table in SQL, for helix.step_journal_records.
var journalStepNames = []string{
	steps.NameRunTool, steps.NameCommitStep, steps.NameCallModel, steps.NameFireHooks,
	steps.NameBeginRun, steps.NameEndRun, steps.NameApprovalGate, steps.NameSuspendStep,
	steps.NameResolveToolCall, steps.NameSaveSuspendedStep, steps.NameDispatchSubAgent,
	steps.NameInterruptForChildren, steps.NameResumeChild, steps.NameSaveChildWait,
	steps.NameCompanion, steps.NameCompanionCancel, steps.NameCompanionWaitEnded,
	steps.NameDeliverCompletions, NameSegmentStatus,
}

// journalStepCodes maps journalStepNames to their stored form.
var journalStepCodes = func() map[string]string {
	m := make(map[string]string, len(journalStepNames))
	for i, n := range journalStepNames {
		m[n] = strconv.Itoa(i)
	}
	return m
}()

// codeStepName returns the JSON a checkpoint's journal stores name as:
// its index in journalStepNames, else (a name of the application's) its
// JSON string.
func codeStepName(name string) ([]byte, error) {
	if c, ok := journalStepCodes[name]; ok {
		return []byte(c), nil
	}
	return json.Marshal(name)
}

// expandStepName returns the JSON string of a stored step name: a coded
// one (a JSON integer) named back, a string as it is.
func expandStepName(stored json.RawMessage) (json.RawMessage, error) {
	if len(stored) == 0 || stored[0] < '0' || stored[0] > '9' {
		return stored, nil
	}
	i, err := strconv.Atoi(string(stored))
	if err != nil || i >= len(journalStepNames) {
		return nil, fmt.Errorf("unknown step name code %s (written by a newer release? upgrade this one to read it)", stored)
	}
	return json.Marshal(journalStepNames[i])
}

// messageCountKey is the commit output's message count key, coded as the
// journal stores it.
var messageCountKey = codeOutput(`"messageCount":`)

// shortCommitOutput is the output of a commit record the short entry
// stands for (checkpointRecords): the commit's message count alone,
// coded as the journal stores it.
func shortCommitOutput(messageCount int) string {
	return "{" + messageCountKey + strconv.Itoa(messageCount) + "}"
}
