package agentfile

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/helix-agents/helix-dbos/mcp"
)

// MCPServerSpec is one entry of an agent's mcp list: an MCP server whose
// tools the agent takes (package mcp).
type MCPServerSpec struct {
	Server mcp.Server
	// Line is the line of the entry in the file.
	Line int
}

// mcpServer decodes an entry of an agent's mcp list.
func (d *decoder) mcpServer(n *yaml.Node, field string) (MCPServerSpec, error) {
	m := MCPServerSpec{Line: n.Line}
	s := &m.Server
	var env map[string]string
	err := d.mapping(n, field, []key{
		{"name", into(&s.Name, d.str)},
		{"command", into(&s.Command, d.str)},
		{"args", into(&s.Args, list(d, d.str))},
		{"env", into(&env, d.stringMap)},
		{"dir", into(&s.Dir, d.str)},
		{"url", into(&s.URL, d.str)},
		{"headers", into(&s.Headers, d.stringMap)},
		{"bearerTokenEnv", into(&s.BearerTokenEnv, d.envName)},
		{"callTimeout", into(&s.CallTimeout, d.timeout)},
		{"connectTimeout", into(&s.ConnectTimeout, d.timeout)},
		{"reconnects", into(&s.Reconnects, d.integer)},
		{"requireApproval", into(&s.RequireApproval, d.boolean)},
		{"approvalFor", into(&s.ApprovalFor, list(d, d.str))},
	})
	if err != nil {
		return m, err
	}
	for k, v := range env {
		s.Env = append(s.Env, k+"="+v)
	}
	slices.Sort(s.Env)
	if err := s.Validate(); err != nil {
		return m, d.errorf(n.Line, field, "%v", err)
	}
	return m, nil
}

// boolean reads true or false.
func (d *decoder) boolean(n *yaml.Node, field string) (bool, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return false, d.errorf(n.Line, field, "want true or false, got %s", kindName(n))
	}
	return scalar[bool](d, n, field, "true or false")
}

// mcpClients returns the clients of spec's MCP servers, which the caller
// closes (Agents.Close).
func (b *builder) mcpClients(spec *AgentSpec) ([]*mcp.Client, error) {
	var out []*mcp.Client
	for i, m := range spec.MCP {
		c, err := mcp.NewClient(m.Server)
		if err != nil {
			return nil, b.fail(spec, m.Line, fmt.Sprintf("mcp[%d]", i), err)
		}
		out = append(out, c)
	}
	return out, nil
}
