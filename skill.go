package helix

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
)

// MaxSkillNameLength is the longest skill name.
const MaxSkillNameLength = 64

// SkillLoadedEventName is the custom event load_skill emits (a `custom`
// chunk whose data is a [SkillLoadedEvent]). It is part of the stream's
// durable vocabulary: never rename it.
const SkillLoadedEventName = "skill_loaded"

// SkillLoadedEvent is the data of the [SkillLoadedEventName] custom event.
// The event is informational: consumers may render it or ignore it.
type SkillLoadedEvent struct {
	Name string `json:"name"`
}

// skillNamePattern has no '_', so a skill name never looks like a tool name
// of the framework (load_skill, __finish__, subagent__x).
var skillNamePattern = regexp.MustCompile(`^[a-z0-9-]+$`)

// Skill is an in-code skill: a packaged capability the model discovers in
// three levels (progressive disclosure). Its Name and Description belong in
// the system prompt (see [Agent.SkillsPromptFragment]); the model loads
// the Body on demand with the load_skill tool and reads Resources with the
// read_skill_file tool. A Skill is plain data: the skill tools only return
// it, they never execute anything (a bundled script is text to read).
type Skill struct {
	// Name identifies the skill: 1–64 characters from [a-z0-9-]. It is what
	// the model passes to load_skill.
	Name string
	// Description says what the skill does and when to use it; the model
	// picks skills from it. Required. It is rendered on one catalog entry,
	// with &, < and > escaped.
	Description string
	// Body holds the skill's full instructions (usually markdown), returned
	// verbatim by load_skill. Required.
	Body string
	// Resources maps a file's path relative to the skill, such as
	// "references/api.md", to its content. Paths use '/', are relative, are
	// in clean form (path.Clean leaves them unchanged) and have no ".."
	// element. May be nil.
	Resources map[string]string
}

// ValidateSkillName checks a skill's name: 1 to 64 characters from
// [a-z0-9-]. The missing '_' keeps skill names apart from tool names.
func ValidateSkillName(name string) error {
	switch {
	case name == "":
		return errors.New("name is empty")
	case len(name) > MaxSkillNameLength:
		return fmt.Errorf("name %q is %d characters, longer than %d", name, len(name), MaxSkillNameLength)
	case !skillNamePattern.MatchString(name):
		return fmt.Errorf("name %q may only contain lowercase letters, digits and '-' (no '_', which tool names use)", name)
	}
	return nil
}

// validateSkills checks the agent's Skills, returning the offending field
// and the reason. PreloadSkills is not checked here: an unknown preloaded
// name is skipped (see [Agent.UnknownPreloadSkills]), never fatal.
func validateSkills(skills []Skill) (field string, err error) {
	seen := make(map[string]int, len(skills))
	for i, s := range skills {
		field := fmt.Sprintf("Skills[%d]", i)
		if err := ValidateSkillName(s.Name); err != nil {
			return field + ".Name", err
		}
		if j, dup := seen[s.Name]; dup {
			return field + ".Name", fmt.Errorf("duplicate skill name %q (also Skills[%d])", s.Name, j)
		}
		seen[s.Name] = i
		if strings.TrimSpace(s.Description) == "" {
			return field + ".Description", errors.New("is empty: say what the skill does and when to use it (the model chooses skills by their description)")
		}
		if strings.TrimSpace(s.Body) == "" {
			return field + ".Body", errors.New("is empty: the body holds the skill's instructions that load_skill returns")
		}
		// Sorted, so the reported problem does not depend on map order.
		for _, p := range sortedKeys(s.Resources) {
			if err := checkResourcePath(p); err != nil {
				return fmt.Sprintf("%s.Resources[%q]", field, p), err
			}
		}
	}
	return "", nil
}

// checkResourcePath checks a resource path as declared in Skill.Resources.
func checkResourcePath(p string) error {
	switch {
	case p == "":
		return errors.New("the path is empty: name the file relative to the skill, such as references/api.md")
	case strings.Contains(p, `\`):
		return errors.New(`the path contains '\': separate directories with '/'`)
	case path.IsAbs(p):
		return errors.New("the path is absolute: make it relative to the skill, such as references/api.md")
	case slices.Contains(strings.Split(p, "/"), ".."):
		return errors.New(`the path contains "..": resource paths stay inside the skill`)
	case p == ".":
		return errors.New(`the path "." names the skill itself, not a file`)
	case path.Clean(p) != p:
		return fmt.Errorf("the path is not in clean form: write it as %q", path.Clean(p))
	}
	return nil
}

// UnknownPreloadSkills returns the names in PreloadSkills that match no skill
// in Skills, in their order and without repeats, or nil. Such names are
// skipped (one bad name never breaks the agent); the engine should log them
// as a warning.
func (a *Agent) UnknownPreloadSkills() []string {
	if a == nil {
		return nil
	}
	known := make(map[string]bool, len(a.Skills))
	for _, s := range a.Skills {
		known[s.Name] = true
	}
	var unknown []string
	for _, name := range a.PreloadSkills {
		if !known[name] && !slices.Contains(unknown, name) {
			unknown = append(unknown, name)
		}
	}
	return unknown
}

// Texts of the skills prompt fragment. Changing them changes every agent's
// cached system-prompt prefix: edit them deliberately.
const (
	skillsIntro = "## Skills\n\n" +
		"Each skill below packages instructions, with optional reference files, for a specialized task. " +
		"A Skill is NOT a tool: never call a skill's name as a tool. " +
		"To use a skill, call the " + LoadSkillToolName + " tool with the skill's name; it returns the skill's full instructions. " +
		"Read a skill's bundled files with the " + ReadSkillFileToolName + " tool."
	skillsPreloadedNote = ` Skills marked loaded="true" are already active (see Active Skills below): do not load them again.`
)

var descriptionEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// SkillsPromptFragment returns the skills section to append to the system
// prompt (after a blank line), or "" when the agent has no skills. It holds
// the catalog (every skill's name and description, in an <available_skills>
// list sorted by name) under a guardrail telling the model that a skill is
// not a tool, and the bodies of the PreloadSkills under "### Active Skills".
// Preloaded skills are marked loaded="true" in the catalog; unknown preload
// names are skipped.
//
// The fragment depends only on the agent's definition, never on the
// transcript, so it is byte-stable for a given definition whatever the order
// of Skills and PreloadSkills: it stays in the provider's cached prompt
// prefix. Whether the model has loaded a skill since is deliberately not
// shown (that would change the prefix on every load); the load_skill results
// in the transcript carry it.
func (a *Agent) SkillsPromptFragment() string {
	if a == nil || len(a.Skills) == 0 {
		return ""
	}
	skills := sortedSkills(a.Skills)
	preloaded := make(map[string]bool, len(a.PreloadSkills))
	for _, name := range a.PreloadSkills {
		preloaded[name] = true
	}
	var active []Skill
	for _, s := range skills {
		// A name listed twice (an invalid definition) is rendered once.
		if preloaded[s.Name] && !slices.ContainsFunc(active, func(x Skill) bool { return x.Name == s.Name }) {
			active = append(active, s)
		}
	}

	var b strings.Builder
	b.WriteString(skillsIntro)
	if len(active) > 0 {
		b.WriteString(skillsPreloadedNote)
	}
	b.WriteString("\n\n<available_skills>\n")
	for _, s := range skills {
		fmt.Fprintf(&b, "<skill name=%q", s.Name)
		if preloaded[s.Name] {
			b.WriteString(` loaded="true"`)
		}
		fmt.Fprintf(&b, ">%s</skill>\n", descriptionEscaper.Replace(strings.TrimSpace(s.Description)))
	}
	b.WriteString("</available_skills>")
	if len(active) > 0 {
		b.WriteString("\n\n### Active Skills\n")
		for _, s := range active {
			fmt.Fprintf(&b, "\n<skill_content name=%q>\n%s\n</skill_content>\n", s.Name, strings.TrimSpace(s.Body))
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// sortedSkills returns a copy of skills sorted by name. Ties (duplicate
// names, which Validate rejects) are broken by content so that even an
// invalid definition renders the same whatever its order.
func sortedSkills(skills []Skill) []Skill {
	out := slices.Clone(skills)
	slices.SortFunc(out, func(x, y Skill) int {
		return cmp.Or(strings.Compare(x.Name, y.Name),
			strings.Compare(x.Description, y.Description),
			strings.Compare(x.Body, y.Body))
	})
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Descriptions and input schemas of the skill tools. They are written by hand
// (not derived) so the tool specs the model sees never change with a
// dependency upgrade.
const (
	loadSkillDescription = "Load a skill's full instructions by name. Call this before using a skill listed in <available_skills>; " +
		"a skill is not a tool and cannot be called directly. The result holds the instructions (body) and the paths of " +
		"the skill's bundled files, which " + ReadSkillFileToolName + " reads."
	loadSkillInputSchema = `{"type":"object","properties":{` +
		`"name":{"type":"string","description":"The skill's name, as listed in <available_skills>."}` +
		`},"required":["name"],"additionalProperties":false}`

	readSkillFileDescription = "Read a file bundled with a skill (a reference, script or asset listed in the resources of the " +
		LoadSkillToolName + " result). Optionally read only lines startLine to endLine (1-based, inclusive). " +
		"Scripts are returned as text; this tool does not run anything."
	readSkillFileInputSchema = `{"type":"object","properties":{` +
		`"name":{"type":"string","description":"The skill's name, as listed in <available_skills>."},` +
		`"path":{"type":"string","description":"The file's path relative to the skill, such as references/api.md."},` +
		`"startLine":{"type":"integer","description":"First line to return, 1-based. Default 1."},` +
		`"endLine":{"type":"integer","description":"Last line to return, inclusive. Default: the last line of the file."}` +
		`},"required":["name","path"],"additionalProperties":false}`
)

// loadSkillInput is the model's load_skill arguments (checked against
// loadSkillInputSchema before decoding).
type loadSkillInput struct {
	Name string `json:"name"`
}

// LoadSkillResult is what load_skill returns to the model (JSON-encoded).
type LoadSkillResult struct {
	Name string `json:"name"`
	// Body is the skill's Body, verbatim.
	Body string `json:"body"`
	// Resources are the paths read_skill_file accepts for this skill,
	// sorted; empty (never null) when the skill bundles no files.
	Resources []string `json:"resources"`
}

type readSkillFileInput struct {
	Name      string `json:"name"`
	Path      string `json:"path"`
	StartLine *int   `json:"startLine"`
	EndLine   *int   `json:"endLine"`
}

// ReadSkillFileResult is what read_skill_file returns to the model
// (JSON-encoded).
type ReadSkillFileResult struct {
	Name string `json:"name"`
	// Path is the file's path as declared in Skill.Resources.
	Path string `json:"path"`
	// StartLine and EndLine are the 1-based inclusive lines returned, both 0
	// for an empty file.
	StartLine  int `json:"startLine"`
	EndLine    int `json:"endLine"`
	TotalLines int `json:"totalLines"`
	// Content is the text of the lines, with their line endings.
	Content string `json:"content"`
}

// skillLibrary is the read-only snapshot of an agent's skills that the skill
// tools close over. It is built once and never changed, so the tools are
// pure functions of their input: safe to re-run when a durable step replays.
type skillLibrary struct {
	byName map[string]Skill
	names  []string // sorted
}

func newSkillLibrary(skills []Skill) *skillLibrary {
	lib := &skillLibrary{byName: make(map[string]Skill, len(skills))}
	for _, s := range skills {
		// Copy the resources: a caller changing its map later must not
		// change what a replayed step returns.
		s.Resources = maps.Clone(s.Resources)
		lib.byName[s.Name] = s
		lib.names = append(lib.names, s.Name)
	}
	slices.Sort(lib.names)
	return lib
}

// newSkillTools builds load_skill and read_skill_file over skills, which
// Agent.Validate has accepted.
func newSkillTools(skills []Skill) ([]*Tool, error) {
	lib := newSkillLibrary(skills)
	load, err := build(LoadSkillToolName, loadSkillDescription, json.RawMessage(loadSkillInputSchema), nil,
		skillToolFunc(LoadSkillToolName, lib.load), false, nil)
	if err != nil {
		return nil, fmt.Errorf("helix: build %s: %w", LoadSkillToolName, err)
	}
	read, err := build(ReadSkillFileToolName, readSkillFileDescription, json.RawMessage(readSkillFileInputSchema), nil,
		skillToolFunc(ReadSkillFileToolName, lib.readFile), false, nil)
	if err != nil {
		return nil, fmt.Errorf("helix: build %s: %w", ReadSkillFileToolName, err)
	}
	return []*Tool{load, read}, nil
}

// skillToolFunc adapts a typed skill tool function to a rawFunc. (NewTool
// does the same for user tools but also rejects the reserved names.)
func skillToolFunc[In, Out any](name string, fn func(in In, tc ToolContext) (Out, error)) rawFunc {
	return func(_ context.Context, args json.RawMessage, tc ToolContext) (json.RawMessage, error) {
		return callTyped(name, args, func(in In) (Out, error) { return fn(in, tc) })
	}
}

// skill returns the named skill, or an error listing the available ones.
func (l *skillLibrary) skill(tool, name string) (Skill, error) {
	s, ok := l.byName[name]
	if !ok {
		return Skill{}, fmt.Errorf("%s: unknown skill %q: the available skills are %s; pass one of these names exactly",
			tool, name, strings.Join(l.names, ", "))
	}
	return s, nil
}

func (l *skillLibrary) load(in loadSkillInput, tc ToolContext) (LoadSkillResult, error) {
	s, err := l.skill(LoadSkillToolName, in.Name)
	if err != nil {
		return LoadSkillResult{}, err
	}
	if tc != nil {
		// The event is informational (consumers may ignore it) and the
		// body is what the model needs: a failed emit must not turn a
		// successful load into a tool error, so its error is dropped.
		_ = tc.Emit(SkillLoadedEventName, SkillLoadedEvent{Name: s.Name})
	}
	return LoadSkillResult{Name: s.Name, Body: s.Body, Resources: sortedKeys(s.Resources)}, nil
}

func (l *skillLibrary) readFile(in readSkillFileInput, _ ToolContext) (ReadSkillFileResult, error) {
	s, err := l.skill(ReadSkillFileToolName, in.Name)
	if err != nil {
		return ReadSkillFileResult{}, err
	}
	files := sortedKeys(s.Resources)
	listing := "it bundles no files"
	if len(files) > 0 {
		listing = "its files are " + strings.Join(files, ", ")
	}
	p, err := cleanRequestedPath(in.Path)
	if err != nil {
		return ReadSkillFileResult{}, fmt.Errorf("%s: %w; paths are relative to skill %q and %s", ReadSkillFileToolName, err, s.Name, listing)
	}
	content, ok := s.Resources[p]
	if !ok {
		return ReadSkillFileResult{}, fmt.Errorf("%s: skill %q has no file %q; %s", ReadSkillFileToolName, s.Name, in.Path, listing)
	}

	lines := splitLines(content)
	total := len(lines)
	res := ReadSkillFileResult{Name: s.Name, Path: p, TotalLines: total}
	if in.StartLine == nil && in.EndLine == nil {
		if total > 0 {
			res.StartLine, res.EndLine = 1, total
		}
		res.Content = content
		return res, nil
	}
	start, end := 1, total
	if in.StartLine != nil {
		start = *in.StartLine
	}
	if in.EndLine != nil {
		end = *in.EndLine
	}
	where := fmt.Sprintf("%s: file %q of skill %q", ReadSkillFileToolName, p, s.Name)
	switch {
	case start < 1:
		return ReadSkillFileResult{}, fmt.Errorf("%s: startLine must be >= 1 (lines are numbered from 1), got %d", where, start)
	case start > total:
		return ReadSkillFileResult{}, fmt.Errorf("%s: startLine %d is past the end of the file, which has %d lines", where, start, total)
	case end < start:
		return ReadSkillFileResult{}, fmt.Errorf("%s: endLine %d is before startLine %d: pass endLine >= startLine, or omit it to read to the end", where, end, start)
	}
	end = min(end, total)
	res.StartLine, res.EndLine = start, end
	res.Content = strings.Join(lines[start-1:end], "")
	return res, nil
}

// cleanRequestedPath resolves a path the model asked for, lexically: it
// accepts '\' as a separator, rejects absolute paths and any ".." element
// (so nothing can name a file outside the skill), and cleans the rest
// ("./a//b" is "a/b").
func cleanRequestedPath(p string) (string, error) {
	p = strings.ReplaceAll(p, `\`, "/")
	switch {
	case strings.TrimSpace(p) == "":
		return "", errors.New("the path is empty")
	case path.IsAbs(p):
		return "", fmt.Errorf("the path %q is absolute", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return "", fmt.Errorf(`the path %q contains ".." and could escape the skill`, p)
	}
	c := path.Clean(p)
	if c == "." {
		return "", fmt.Errorf("the path %q names the skill itself, not a file", p)
	}
	return c, nil
}

// splitLines splits s after each '\n', keeping the line endings; a final
// line without '\n' counts, an empty string has no lines.
func splitLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}
