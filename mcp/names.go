package mcp

import (
	"fmt"
	"hash/fnv"
	"strings"

	helix "github.com/helix-agents/helix-dbos"
)

// NameSeparator joins a server's name and its tool's in the name the model
// sees.
const NameSeparator = "__"

// ToolSpec is one tool of a server as the model is offered it
// (helix.SourceTool): Source is the server's Name, Remote the tool's name
// on it, NeedsApproval from Server.RequireApproval and ApprovalFor.
type ToolSpec = helix.SourceTool

// ToolName returns the name the model sees for the tool remote of server:
// "{server}__{remote}" when that is 64 characters or fewer of
// [a-zA-Z0-9_-]; otherwise the invalid characters become '_' and the name
// is cut to leave room for "_" and eight hex digits of a hash of remote,
// so that two tools whose names only differ in what was replaced or cut
// keep distinct names. The name depends on server and remote alone.
func ToolName(server, remote string) string {
	clean := strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, remote)
	name := server + NameSeparator + clean
	if clean == remote && remote != "" && len(name) <= helix.MaxToolNameLength {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(remote))
	suffix := fmt.Sprintf("_%08x", h.Sum32())
	if len(name) > helix.MaxToolNameLength-len(suffix) {
		name = name[:helix.MaxToolNameLength-len(suffix)]
	}
	return name + suffix
}
