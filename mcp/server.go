package mcp

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"time"
)

// Defaults of a Server.
const (
	// DefaultCallTimeout bounds one tool call when Server.CallTimeout is 0.
	DefaultCallTimeout = 60 * time.Second
	// DefaultConnectTimeout bounds starting or reaching the server and the
	// protocol's initialization when Server.ConnectTimeout is 0.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultReconnects is how many times a request opens the connection
	// again after it was lost, when Server.Reconnects is 0.
	DefaultReconnects = 2
	// MaxServerNameLength is the longest Server.Name: it prefixes every
	// tool name, which providers limit to 64 characters.
	MaxServerNameLength = 24
)

// Server describes an MCP server: exactly one of Command (stdio) or URL
// (streamable HTTP).
type Server struct {
	// Name identifies the server within an agent: its tools are offered to
	// the model as "{Name}__{tool}", and approval requests show it. 1 to
	// MaxServerNameLength characters from [a-zA-Z0-9-], starting with a
	// letter.
	Name string `json:"name" yaml:"name"`

	// Command runs the server as a child process spoken to over its stdin
	// and stdout, with Args. Env adds "KEY=VALUE" entries to the
	// process's environment (which is otherwise this process's); Dir is its
	// working directory ("" for this process's).
	Command string   `json:"command,omitempty" yaml:"command,omitempty"`
	Args    []string `json:"args,omitempty" yaml:"args,omitempty"`
	Env     []string `json:"env,omitempty" yaml:"env,omitempty"`
	Dir     string   `json:"dir,omitempty" yaml:"dir,omitempty"`

	// URL reaches the server over streamable HTTP (http or https), with
	// Headers on every request. BearerTokenEnv names an environment
	// variable whose value is sent as "Authorization: Bearer …"; it is read
	// when the connection opens, and an unset or empty variable is an
	// error (the token is never part of the configuration itself).
	URL            string            `json:"url,omitempty" yaml:"url,omitempty"`
	Headers        map[string]string `json:"headers,omitempty" yaml:"headers,omitempty"`
	BearerTokenEnv string            `json:"bearerTokenEnv,omitempty" yaml:"bearerTokenEnv,omitempty"`

	// CallTimeout bounds one tool call (0: DefaultCallTimeout);
	// ConnectTimeout bounds opening the connection (0:
	// DefaultConnectTimeout). Reconnects is how many times a request opens
	// a lost connection again before it fails (0: DefaultReconnects;
	// negative: never).
	CallTimeout    time.Duration `json:"callTimeout,omitempty" yaml:"callTimeout,omitempty"`
	ConnectTimeout time.Duration `json:"connectTimeout,omitempty" yaml:"connectTimeout,omitempty"`
	Reconnects     int           `json:"reconnects,omitempty" yaml:"reconnects,omitempty"`

	// RequireApproval makes every tool of the server wait for a person's
	// approval before it runs; ApprovalFor does it for the tools whose
	// server-side names match one of its patterns (path.Match syntax, e.g.
	// "delete_*").
	RequireApproval bool     `json:"requireApproval,omitempty" yaml:"requireApproval,omitempty"`
	ApprovalFor     []string `json:"approvalFor,omitempty" yaml:"approvalFor,omitempty"`
}

var serverNameRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*$`)

// Validate reports what is wrong with s, naming each field.
func (s Server) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("mcp server %q: %s: %s", s.Name, field, fmt.Sprintf(format, args...)))
	}
	switch {
	case s.Name == "":
		bad("name", "required (it prefixes the server's tool names)")
	case len(s.Name) > MaxServerNameLength:
		bad("name", "%d characters, at most %d (it prefixes tool names, which providers limit to 64)", len(s.Name), MaxServerNameLength)
	case !serverNameRE.MatchString(s.Name):
		bad("name", "use letters, digits and '-', starting with a letter")
	}
	switch {
	case s.Command == "" && s.URL == "":
		bad("command/url", "give a command (stdio) or a url (streamable HTTP)")
	case s.Command != "" && s.URL != "":
		bad("command/url", "give a command (stdio) or a url (streamable HTTP), not both")
	case s.URL != "":
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("url", "%q is not an http or https URL", s.URL)
		}
		if len(s.Args) > 0 || len(s.Env) > 0 || s.Dir != "" {
			bad("args/env/dir", "only for a stdio server (command)")
		}
	default:
		if len(s.Headers) > 0 || s.BearerTokenEnv != "" {
			bad("headers/bearerTokenEnv", "only for an HTTP server (url)")
		}
	}
	if s.CallTimeout < 0 {
		bad("callTimeout", "negative (%s)", s.CallTimeout)
	}
	if s.ConnectTimeout < 0 {
		bad("connectTimeout", "negative (%s)", s.ConnectTimeout)
	}
	for _, p := range s.ApprovalFor {
		if _, err := path.Match(p, ""); err != nil {
			bad("approvalFor", "pattern %q: %v", p, err)
		}
	}
	return errors.Join(errs...)
}

// NeedsApproval reports whether the server's tool named remote (its name on
// the server) waits for a person's approval.
func (s Server) NeedsApproval(remote string) bool {
	if s.RequireApproval {
		return true
	}
	for _, p := range s.ApprovalFor {
		if ok, _ := path.Match(p, remote); ok {
			return true
		}
	}
	return false
}

func (s Server) callTimeout() time.Duration {
	if s.CallTimeout > 0 {
		return s.CallTimeout
	}
	return DefaultCallTimeout
}

func (s Server) connectTimeout() time.Duration {
	if s.ConnectTimeout > 0 {
		return s.ConnectTimeout
	}
	return DefaultConnectTimeout
}

func (s Server) reconnects() int {
	switch {
	case s.Reconnects < 0:
		return 0
	case s.Reconnects == 0:
		return DefaultReconnects
	}
	return s.Reconnects
}
