package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	helix "github.com/helix-agents/helix-dbos"
	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/store"
)

// exitRejected is the exit status of a submission the engine rejected
// (1 is every other failure: no database, a typo in a flag, ...).
const exitRejected = 2

// withClient runs fn on an engine client connected to the configured
// database: it submits and interrupts without an engine or any agent
// definition.
func withClient(ctx context.Context, g *globals, fn func(c *engine.Client) error) error {
	url, err := g.requireDatabaseURL()
	if err != nil {
		return err
	}
	if err := checkClientDatabase(ctx, url); err != nil {
		return err
	}
	c, err := engine.NewClient(ctx, engine.ClientConfig{DatabaseURL: url, Logger: g.logger()})
	if err != nil {
		return explain(err)
	}
	defer func() { _ = c.Close() }()
	return explain(fn(c))
}

// checkClientDatabase says clearly what a client cannot work without: a
// reachable database with the helix schema, on which an engine has run
// (DBOS's system schema).
func checkClientDatabase(ctx context.Context, url string) error {
	conn, err := connectDatabase(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := queryContext(ctx)
	defer cancel()
	exist, err := diagnostics(conn).RelationsExist(qctx, "helix.sessions", "dbos.workflow_status")
	if err != nil {
		return queryError(ctx, "inspect "+describeDatabase(url), err)
	}
	switch helixOK, dbosOK := exist[0], exist[1]; {
	case !helixOK:
		return fmt.Errorf("%s has no helix schema: run `helix-dbos migrate up` against it, or check --database-url (it must be the database your engines use)", describeDatabase(url))
	case !dbosOK:
		return fmt.Errorf("no engine has run on %s yet (DBOS's system schema is missing), so no session here waits for anything: check --database-url (it must be the database your engines use)", describeDatabase(url))
	}
	return nil
}

// submissionHelp is the part of the submitting commands' help they share.
const submissionHelp = "Submit on the root session of the conversation (the session you started): a call made by a\n" +
	"sub-agent is routed to it. `helix-dbos sessions show <session>` lists the calls a session\n" +
	"waits for; the stream shows them too (tool_approval_request for a gated call, tool_start\n" +
	"for a client-executed one). The answer is recorded in Postgres and delivered to the waiting\n" +
	"run exactly once; the run continues by itself in whichever process runs it, or when a\n" +
	"process recovers it. Needs no engine and no agent definition: any process with database\n" +
	"access can answer.\n\n" +
	"Answering a call twice changes nothing: the first answer stands, and the command says\n" +
	"\"already answered earlier\" and exits 0.\n\n" +
	"Exit status: 0 when the answer was delivered or had already been given; 2 when the engine\n" +
	"rejected it (the error names the code: unknown_tool_call, kind_mismatch, invalid_result,\n" +
	"invalid_submission, timed_out, session_interrupted, session_not_waiting or not_root_session); 1 otherwise."

// callArgs checks the <session> <toolCallId> arguments of a submitting
// command.
func callArgs(use string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 2 {
			return fmt.Errorf("want 2 arguments, got %d: usage: helix-dbos %s (`helix-dbos sessions show <session>` lists the calls a session waits for)", len(args), use)
		}
		if strings.TrimSpace(args[0]) == "" || strings.TrimSpace(args[1]) == "" {
			return fmt.Errorf("the session and the tool call ID must not be empty: usage: helix-dbos %s", use)
		}
		return nil
	}
}

func newApproveCmd(g *globals) *cobra.Command { return newDecisionCmd(g, true) }

func newDenyCmd(g *globals) *cobra.Command { return newDecisionCmd(g, false) }

// newDecisionCmd returns approve or deny.
func newDecisionCmd(g *globals, approve bool) *cobra.Command {
	var (
		reason string
		asJSON bool
	)
	verb, short, what := "deny", "Deny an approval-gated tool call: the tool never runs and the run continues",
		"The tool never runs: the model reads \""+helix.NotApprovedMessage+"\" as the\n"+
			"call's result (with your --reason in the stream's tool_approval_response) and goes on."
	if approve {
		verb, short, what = "approve", "Approve an approval-gated tool call: the tool runs and the run continues",
			"The tool then runs, once, with the input the model gave it, in the process that runs the\n"+
				"session, and the model reads its result."
	}
	use := verb + " <session> <toolCallId>"
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: "Answers a tool call that waits for approval (a tool defined with helix.RequireApproval or\n" +
			"helix.RequireApprovalWhen; the stream shows its tool_approval_request).\n" + what + "\n\n" + submissionHelp,
		Example: fmt.Sprintf("  helix-dbos %s support-42 call_transfer_1 --reason \"checked with the customer\"", verb),
		Args:    callArgs(use + " [--reason R]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sub := helix.Deny(args[1], reason)
			if approve {
				sub = helix.Approve(args[1], reason)
			}
			return runSubmission(cmd.Context(), cmd.OutOrStdout(), g, args[0], sub, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&reason, "reason", "", "why (optional): recorded with the decision and shown in the stream")
	f.BoolVar(&asJSON, "json", false, "print the outcome as JSON for scripts (a rejection too, besides the exit status)")
	return cmd
}

func newSubmitCmd(g *globals) *cobra.Command {
	var (
		result, resultFile, errMsg string
		asJSON                     bool
	)
	use := "submit <session> <toolCallId> (--result JSON | --result-file F | --error MSG)"
	cmd := &cobra.Command{
		Use:   use,
		Short: "Answer a client-executed tool call with its result, or report that it failed",
		Long: "Answers a tool call that waits for its client (a tool defined with helix.NewClientTool).\n" +
			"Give exactly one of:\n\n" +
			"  --result JSON       the tool's result, a JSON value (checked here, then against the tool's\n" +
			"                      output schema: a result that does not match is rejected with\n" +
			"                      invalid_result and every violation, and nothing is recorded)\n" +
			"  --result-file F     the same, read from file F (- reads standard input)\n" +
			"  --error MSG         the tool failed: the model reads MSG as the call's error\n\n" +
			submissionHelp,
		Example: "  helix-dbos submit support-42 call_ask_1 --result '{\"answer\":\"green\"}'\n" +
			"  helix-dbos submit support-42 call_ask_1 --result-file answer.json\n" +
			"  helix-dbos submit support-42 call_ask_1 --error \"the user closed the dialog\"",
		Args: callArgs(use),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			var given []string
			for _, name := range []string{"result", "result-file", "error"} {
				if f.Changed(name) {
					given = append(given, "--"+name)
				}
			}
			if len(given) != 1 {
				return fmt.Errorf("give exactly one of --result JSON, --result-file F and --error MSG (got %s)", listOrNone(given))
			}
			var sub helix.ToolSubmission
			switch {
			case f.Changed("error"):
				if strings.TrimSpace(errMsg) == "" {
					return errors.New("--error needs a message: the model reads it as the tool's error")
				}
				sub = helix.ClientToolError(args[1], errMsg)
			default:
				raw, from, err := readResult(cmd.InOrStdin(), result, resultFile, f.Changed("result-file"))
				if err != nil {
					return err
				}
				if err := checkJSON(raw, from); err != nil {
					return err
				}
				sub = helix.ToolSubmission{Kind: helix.SubmissionClientToolResult, ToolCallID: args[1], Result: json.RawMessage(raw)}
			}
			return runSubmission(cmd.Context(), cmd.OutOrStdout(), g, args[0], sub, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&result, "result", "", "the tool's result as JSON, e.g. '{\"answer\":\"green\"}' (a string is '\"text\"')")
	f.StringVar(&resultFile, "result-file", "", "read the result's JSON from this file (- for standard input)")
	f.StringVar(&errMsg, "error", "", "report that the tool failed, with this message for the model")
	f.BoolVar(&asJSON, "json", false, "print the outcome as JSON for scripts (a rejection too, besides the exit status)")
	return cmd
}

func listOrNone(flags []string) string {
	if len(flags) == 0 {
		return "none"
	}
	return strings.Join(flags, " and ")
}

// readResult returns the result's JSON from --result or --result-file,
// and where it came from for error messages.
func readResult(stdin io.Reader, result, file string, fromFile bool) ([]byte, string, error) {
	if !fromFile {
		return []byte(result), "--result", nil
	}
	if file == "" {
		return nil, "", errors.New("--result-file needs a file name (- reads standard input)")
	}
	if file == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, "", fmt.Errorf("read the result from standard input: %w", err)
		}
		return b, "the result on standard input", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, "", fmt.Errorf("--result-file: %w", err)
	}
	return b, "--result-file " + file, nil
}

// checkJSON validates a result locally, so a typo is reported with its
// position before anything is sent.
func checkJSON(raw []byte, from string) error {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return fmt.Errorf("%s is empty: give the tool's result as JSON (an object, an array, a number, true/false, null or a quoted string)", from)
	}
	var v any
	err := json.Unmarshal(raw, &v)
	if err == nil {
		return nil
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Errorf("%s is not valid JSON: %v (at byte %d); a string must be quoted: '\"text\"'", from, err, syntax.Offset)
	}
	return fmt.Errorf("%s is not valid JSON: %v", from, err)
}

// submissionReport is what the submitting commands print with --json.
type submissionReport struct {
	SessionID  string               `json:"sessionId"`
	ToolCallID string               `json:"toolCallId"`
	ToolName   string               `json:"toolName,omitempty"`
	Kind       helix.SubmissionKind `json:"kind"`
	// Outcome is delivered, already_answered or rejected.
	Outcome        string           `json:"outcome"`
	OwnerSessionID string           `json:"ownerSessionId,omitempty"`
	RunID          string           `json:"runId,omitempty"`
	Remaining      []string         `json:"remaining"`
	Rejection      *rejectionReport `json:"rejection,omitempty"`
}

type rejectionReport struct {
	Code       string            `json:"code"`
	Reason     string            `json:"reason"`
	Hint       string            `json:"hint,omitempty"`
	Violations []helix.Violation `json:"violations,omitempty"`
}

// Submission outcomes (submissionReport.Outcome).
const (
	outcomeDelivered = "delivered"
	outcomeAlready   = "already_answered"
	outcomeRejected  = "rejected"
)

// runSubmission submits sub on the session and prints what happened.
func runSubmission(ctx context.Context, out io.Writer, g *globals, sessionID string, sub helix.ToolSubmission, asJSON bool) error {
	return withClient(ctx, g, func(c *engine.Client) error {
		// The calls as they wait now, for the tool names in the report
		// (best effort: the submission itself is the authority).
		calls := map[string]store.PendingClientToolCall{}
		if s, err := c.Session(ctx, sessionID); err == nil {
			list, err := c.PendingToolCalls(ctx, s.SessionID)
			if err != nil {
				return err
			}
			for _, p := range list {
				calls[p.ToolCallID] = p
			}
		}
		rep := submissionReport{SessionID: sessionID, ToolCallID: sub.ToolCallID, Kind: sub.Kind,
			ToolName: calls[sub.ToolCallID].ToolName, Remaining: []string{}}
		res, err := c.SubmitToolResult(ctx, sessionID, sub)
		var se *helix.SubmissionError
		if errors.As(err, &se) {
			rej := &rejectedError{se: se, session: sessionID, hint: rejectionHint(se, sessionID, sub, calls[sub.ToolCallID])}
			if asJSON {
				rep.Outcome = outcomeRejected
				rep.Rejection = &rejectionReport{Code: se.Code, Reason: se.Reason, Hint: rej.hint, Violations: se.Violations}
				if err := printJSON(out, rep); err != nil {
					return err
				}
			}
			return rej
		}
		if err != nil {
			return err
		}
		rep.OwnerSessionID, rep.RunID = res.OwnerSessionID, res.RunID
		rep.Remaining = append(rep.Remaining, res.Remaining...)
		rep.Outcome = outcomeDelivered
		if res.AlreadyCompleted {
			rep.Outcome = outcomeAlready
		}
		if asJSON {
			return printJSON(out, rep)
		}
		printSubmission(out, rep, sub, calls)
		return nil
	})
}

// printSubmission says what a submission did, in words.
func printSubmission(out io.Writer, rep submissionReport, sub helix.ToolSubmission, calls map[string]store.PendingClientToolCall) {
	call := "tool call " + rep.ToolCallID
	if rep.ToolName != "" {
		call = fmt.Sprintf("%s (call %s)", rep.ToolName, rep.ToolCallID)
	}
	if rep.Outcome == outcomeAlready {
		fmt.Fprintf(out, "%s in session %s was already answered earlier: nothing changed (the first answer stands)\n", call, rep.SessionID)
		return
	}
	var did string
	switch {
	case sub.Kind == helix.SubmissionApprovalResponse && sub.IsApproved():
		did = "approved"
	case sub.Kind == helix.SubmissionApprovalResponse:
		did = "denied"
	case sub.Error != "":
		did = "reported the failure of"
	default:
		did = "submitted the result of"
	}
	where := "session " + rep.SessionID
	if rep.OwnerSessionID != "" && rep.OwnerSessionID != rep.SessionID {
		where += " (routed to sub-agent session " + rep.OwnerSessionID + ")"
	}
	fmt.Fprintf(out, "%s %s in %s: delivered to run %s\n", did, call, where, rep.RunID)
	if len(rep.Remaining) == 0 {
		fmt.Fprintln(out, "no other call waits: the run continues now")
		return
	}
	names := make([]string, len(rep.Remaining))
	for i, id := range rep.Remaining {
		names[i] = id
		if p, ok := calls[id]; ok {
			names[i] = fmt.Sprintf("%s (%s, %s)", id, p.ToolName, kindLabel(p.Kind))
		}
	}
	fmt.Fprintf(out, "the run continues once these %d call(s) are answered too: %s\n", len(names), strings.Join(names, ", "))
}

// rejectedError is a rejected submission: exit status exitRejected, the
// code and the reason, and what to do about it.
type rejectedError struct {
	se      *helix.SubmissionError
	session string
	hint    string
}

func (e *rejectedError) Error() string {
	s := fmt.Sprintf("tool call %s in session %s: rejected (%s): %s", e.se.ToolCallID, e.session, e.se.Code, e.se.Reason)
	if e.hint != "" {
		s += "\n" + e.hint
	}
	return s
}

func (e *rejectedError) Unwrap() error { return e.se }

// As gives the process its exit status.
func (e *rejectedError) As(target any) bool {
	if code, ok := target.(*exitCode); ok {
		*code = exitRejected
		return true
	}
	return false
}

// rejectionHint says what to do about a rejection.
func rejectionHint(se *helix.SubmissionError, sessionID string, sub helix.ToolSubmission, call store.PendingClientToolCall) string {
	switch se.Code {
	case helix.SubmissionUnknownToolCall:
		return fmt.Sprintf("check the session and the call ID: `helix-dbos sessions show %s` lists the calls it waits for", sessionID)
	case helix.SubmissionKindMismatch:
		if sub.Kind == helix.SubmissionApprovalResponse {
			return fmt.Sprintf("the call is a client-executed tool: answer it with `helix-dbos submit %s %s --result JSON` (or --error MSG)", sessionID, sub.ToolCallID)
		}
		return fmt.Sprintf("the call waits for an approval: answer it with `helix-dbos approve %s %s` or `helix-dbos deny %s %s`", sessionID, sub.ToolCallID, sessionID, sub.ToolCallID)
	case helix.SubmissionInvalidResult:
		if len(call.OutputSchema) > 0 {
			return "the result must match the tool's output schema: " + compactJSON(call.OutputSchema, 300)
		}
		return "fix the result to match the tool's output schema, then submit again (nothing was recorded)"
	case helix.SubmissionInvalid:
		return "fix the submission and try again (nothing was recorded)"
	case helix.SubmissionNotRoot:
		return "submit on the root session of the conversation (the reason names it): it routes the answer to the sub-agent"
	case helix.SubmissionTimedOut:
		return "nothing to do: the run went on without the answer (the model was told the call timed out)"
	case helix.SubmissionSessionInterrupted:
		return "resume the session first (engine.Resume in the process that defines its agent, or `helix-dbos resume " + sessionID + " --agents FILE` for an agent of an agent file), then answer the call again"
	case helix.SubmissionNotWaiting:
		return "nothing consumes the answer any more; `helix-dbos sessions show " + sessionID + "` shows why the session ended"
	}
	return ""
}

// kindLabel names a call's kind for people.
func kindLabel(k helix.SubmissionKind) string {
	switch k {
	case helix.SubmissionApprovalResponse:
		return "approval"
	case helix.SubmissionClientToolResult:
		return "client tool"
	}
	return string(k)
}

// callState says whether a pending call is answered.
func callState(p store.PendingClientToolCall) string {
	switch s := p.Submission; {
	case p.TimedOutAt != 0:
		return "timed out " + fmtTime(msTime(p.TimedOutAt))
	case s == nil:
		return "waiting"
	case s.Kind == helix.SubmissionApprovalResponse && s.IsApproved():
		return "answered: approved" + paren(s.Reason)
	case s.Kind == helix.SubmissionApprovalResponse:
		return "answered: denied" + paren(s.Reason)
	case s.Error != "":
		return "answered: error " + truncate(s.Error, 40)
	}
	return "answered: result " + compactJSON(p.Submission.Result, 40)
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }

// printPending lists the tool calls a session waits for (nothing when there
// are none), each line starting with prefix.
func printPending(out io.Writer, prefix string, s *store.SessionState, calls []store.PendingClientToolCall) {
	if len(calls) == 0 {
		return
	}
	root := cmp.Or(s.RootSessionID, s.SessionID)
	sub := false
	waiting := 0
	for _, c := range calls {
		sub = sub || (c.OwnerSessionID != "" && c.OwnerSessionID != s.SessionID)
		if !c.Resolved() {
			waiting++
		}
	}
	fmt.Fprintf(out, "%spending tool calls (%d waiting, %d answered):\n", prefix, waiting, len(calls)-waiting)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	head := prefix + "  CALL\tTOOL\tKIND\tSTEP\tDEADLINE\tSTATE"
	if sub {
		head += "\tSESSION"
	}
	fmt.Fprintln(w, head)
	for _, c := range calls {
		deadline := "none"
		if c.DeadlineAt != 0 {
			at := msTime(c.DeadlineAt)
			deadline = fmtTime(at)
			if left := time.Until(at); !c.Resolved() && left > 0 {
				deadline += " (in " + left.Round(time.Second).String() + ")"
			}
		}
		line := fmt.Sprintf("%s  %s\t%s\t%s\t%d\t%s\t%s", prefix, c.ToolCallID, c.ToolName, kindLabel(c.Kind), c.Step, deadline, callState(c))
		if sub {
			line += "\t" + cmp.Or(c.OwnerSessionID, "-")
		}
		fmt.Fprintln(w, line)
	}
	_ = w.Flush()
	switch {
	case waiting == 0:
	case s.Status == helix.SessionInterrupted:
		fmt.Fprintf(out, "%s  the session is interrupted: resume it, then answer the calls still waiting\n", prefix)
	case s.Status == helix.SessionActive:
		var how []string
		if slices.ContainsFunc(calls, func(c store.PendingClientToolCall) bool {
			return !c.Resolved() && c.Kind == helix.SubmissionApprovalResponse
		}) {
			how = append(how, fmt.Sprintf("helix-dbos approve|deny %s <call> [--reason R]", root))
		}
		if slices.ContainsFunc(calls, func(c store.PendingClientToolCall) bool {
			return !c.Resolved() && c.Kind == helix.SubmissionClientToolResult
		}) {
			how = append(how, fmt.Sprintf("helix-dbos submit %s <call> --result JSON", root))
		}
		fmt.Fprintf(out, "%s  answer with: %s\n", prefix, strings.Join(how, " · "))
	}
}
