package main

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/helix-agents/helix-dbos/engine"
	"github.com/helix-agents/helix-dbos/internal/agentfile"
	"github.com/helix-agents/helix-dbos/server"
	"github.com/helix-agents/helix-dbos/server/aisdk"
)

// Defaults of serve.
const (
	defaultServeAddr = ":8080"
	// defaultUnauthenticatedAddr replaces defaultServeAddr with
	// --allow-unauthenticated: a server that lets every caller control
	// every session listens on this machine only unless told otherwise.
	defaultUnauthenticatedAddr = "127.0.0.1:8080"
	defaultShutdownTimeout     = 15 * time.Second
	// minTokenLength is the secret length below which serve warns.
	minTokenLength = 16
)

// Timeouts of serve's HTTP server. There is no WriteTimeout: it bounds a
// whole response, and the SSE streams (GET /sse, the chat routes) last as
// long as a run, minutes or hours; the stream handlers bound each of their
// writes instead (server.Config.StreamWriteTimeout, aisdk
// Options.WriteTimeout).
const (
	// serveReadHeaderTimeout bounds reading a request's headers.
	serveReadHeaderTimeout = 10 * time.Second
	// serveReadTimeout bounds reading a whole request, body included,
	// against clients that send slowly to hold connections. It is long
	// enough for a large chat history on a slow link. It does not limit a
	// streamed response: net/http lifts the read deadline once the body
	// has been read.
	serveReadTimeout = time.Minute
	// serveIdleTimeout closes a keep-alive connection left idle that long.
	serveIdleTimeout = 2 * time.Minute
)

// newHTTPServer returns serve's HTTP server for h.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: serveReadHeaderTimeout,
		ReadTimeout:       serveReadTimeout,
		IdleTimeout:       serveIdleTimeout,
	}
}

func newServeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve --agents FILE (--auth-token NAME:SECRET ... | --allow-unauthenticated)",
		Short: "Run the HTTP agent server for the agents of an agent file",
		Long: "Serves the agents of an agent file (YAML: model provider and model, system prompt, max steps,\n" +
			"output schema, client-executed tools, approval tools, sub-agents and companions; see\n" +
			"docs/cli.md and examples/agents.yaml, whose scripted agents need no API key) over HTTP: the\n" +
			"routes of package server (POST /start, GET /sse, GET /status, POST /resume, /interrupt,\n" +
			"/abort, /submit-tool-result, /retry, /branch, GET /healthz, /metrics), the AI SDK chat routes\n" +
			"(/chat) and the web inspector at / (sessions, transcripts, approvals, executors and queues;\n" +
			"--no-inspector turns it off; its data routes take the same bearer tokens).\n\n" +
			"Authentication: every --auth-token NAME:SECRET accepts \"Authorization: Bearer SECRET\" as the\n" +
			"principal NAME, who sees only the sessions they started. Several tokens may be given\n" +
			"(HELIX_AUTH_TOKEN takes a comma-separated list; the config file a list). Without a token\n" +
			"the server refuses to start unless --allow-unauthenticated, which serves every session to\n" +
			"every caller (local development only).\n\n" +
			"The server runs the helix migrations at start (unless --skip-migrations), records its\n" +
			"executor ID (a new one per start unless --executor-id) with a heartbeat every third of\n" +
			"--executor-lease (two live processes must not share one; `doctor` shows it), recovers the\n" +
			"runs its executor ID left pending, and takes over the sessions of executors that stopped,\n" +
			"died on this machine or whose heartbeat is older than their lease. SIGINT or SIGTERM stops\n" +
			"it gracefully: SSE streams end (clients reconnect and lose nothing), in-flight requests\n" +
			"finish, runs stop at a step boundary, and the executor is marked stopped: a live engine\n" +
			"takes its pending sessions over at once.",
		Example: "  helix-dbos serve --agents examples/agents.yaml --allow-unauthenticated\n" +
			"  HELIX_AUTH_TOKEN=alice:$ALICE_SECRET helix-dbos serve --agents agents.yaml --addr :9000\n" +
			"  curl -H \"Authorization: Bearer $ALICE_SECRET\" -H 'Content-Type: application/json' -d '{\"agentType\":\"assistant\",\"message\":\"Hi\"}' localhost:9000/start",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), g)
		},
	}
	f := cmd.Flags()
	f.String("addr", defaultServeAddr, "address to listen on (env HELIX_ADDR; with --allow-unauthenticated and no address given, "+defaultUnauthenticatedAddr+")")
	addEngineFlags(f)
	f.StringArray("auth-token", nil, "a bearer token as NAME:SECRET, NAME being the principal (repeatable; env HELIX_AUTH_TOKEN, comma-separated)")
	f.Bool("allow-unauthenticated", false, "serve every caller without a token, as one principal (development only; env HELIX_ALLOW_UNAUTHENTICATED)")
	f.Bool("skip-migrations", false, "do not run the helix migrations at start (env HELIX_SKIP_MIGRATIONS)")
	f.Bool("no-inspector", false, "do not serve the web inspector at / and /inspector/ (env HELIX_NO_INSPECTOR)")
	f.Duration("shutdown-timeout", defaultShutdownTimeout, "how long a graceful shutdown may take (env HELIX_SHUTDOWN_TIMEOUT)")
	f.Duration("hibernate-after", 0, "how long a session waits for people in its workflow before it hibernates, holding no memory until "+
		"an answer, an interrupt or its deadline wakes it (0: the default, "+engine.DefaultHibernateAfter.String()+"; negative: never; env HELIX_HIBERNATE_AFTER)")
	addQueueFlags(f, false)
	addRetentionFlags(f, false)
	return cmd
}

// bearerToken is one --auth-token.
type bearerToken struct {
	principal server.Principal
	secret    []byte
}

// parseTokens checks the --auth-token values (NAME:SECRET).
func parseTokens(values []string, warn io.Writer) ([]bearerToken, error) {
	var out []bearerToken
	seen := map[string]string{}
	for i, v := range values {
		name, secret, ok := strings.Cut(v, ":")
		name, secret = strings.TrimSpace(name), strings.TrimSpace(secret)
		if !ok || name == "" || secret == "" {
			return nil, fmt.Errorf("auth-token #%d: want NAME:SECRET (the principal's name, a colon, the bearer secret), got %q",
				i+1, redactToken(v))
		}
		if other, dup := seen[secret]; dup && other != name {
			return nil, fmt.Errorf("auth-token #%d: principals %q and %q have the same secret: give each its own", i+1, other, name)
		}
		seen[secret] = name
		if len(secret) < minTokenLength {
			fmt.Fprintf(warn, "warning: the secret of principal %q is %d characters: use at least %d random ones (openssl rand -hex 32)\n",
				name, len(secret), minTokenLength)
		}
		out = append(out, bearerToken{principal: server.Principal(name), secret: []byte(secret)})
	}
	return out, nil
}

// redactToken hides the secret of an --auth-token: NAME:*** for
// NAME:SECRET, and *** for a value without a colon, which may be a bare
// secret.
func redactToken(v string) string {
	if name, _, ok := strings.Cut(v, ":"); ok {
		return name + ":***"
	}
	return "***"
}

// errUnauthenticated is what Authenticate returns for a request without a
// known token (the server logs it at debug level and answers 401).
var errUnauthenticated = errors.New("no known bearer token")

// authenticator accepts "Authorization: Bearer SECRET" for the tokens, in
// constant time per token.
func authenticator(tokens []bearerToken) func(r *http.Request) (server.Principal, error) {
	return func(r *http.Request) (server.Principal, error) {
		scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", errUnauthenticated
		}
		got := []byte(strings.TrimSpace(secret))
		var who server.Principal
		for _, t := range tokens {
			if subtle.ConstantTimeCompare(got, t.secret) == 1 {
				who = t.principal
			}
		}
		if who == "" {
			return "", errUnauthenticated
		}
		return who, nil
	}
}

func runServe(ctx context.Context, out, errOut io.Writer, g *globals) error {
	cfg := g.cfg
	url, err := g.requireDatabaseURL()
	if err != nil {
		return err
	}
	tokens, err := parseTokens(cfg.AuthTokens, errOut)
	if err != nil {
		return err
	}
	switch {
	case len(tokens) > 0 && cfg.AllowUnauthenticated:
		return errors.New("give --auth-token or --allow-unauthenticated, not both")
	case len(tokens) == 0 && !cfg.AllowUnauthenticated:
		return errors.New("serve needs authentication: pass --auth-token NAME:SECRET (repeatable; env HELIX_AUTH_TOKEN=alice:s1,bob:s2; " +
			"auth-token: in the config file), or --allow-unauthenticated to serve every session to every caller (local development only)")
	}
	if cfg.Agents == "" {
		return errors.New("serve needs agents: pass --agents FILE (env HELIX_AGENTS, agents: in the config file); " +
			"examples/agents.yaml runs without an API key, docs/cli.md describes the format")
	}
	say := func(format string, args ...any) { fmt.Fprintf(out, "• "+format+"\n", args...) }
	file, err := g.loadAgentFile()
	if err != nil {
		return err
	}
	// Last, once the engine stopped: the agents' MCP servers.
	defer func() {
		if err := file.Close(); err != nil {
			fmt.Fprintf(errOut, "helix-dbos: %v\n", err)
		}
	}()
	say("agents from %s: %s", cfg.Agents, strings.Join(file.Names(), ", "))
	listenAddr := cfg.Addr
	if cfg.AllowUnauthenticated {
		fmt.Fprintln(errOut, "WARNING: --allow-unauthenticated: every caller can start, read, answer and abort every session.\n"+
			"WARNING: use it only on a trusted machine; give --auth-token NAME:SECRET anywhere else.")
		if g.sources["addr"].Kind == sourceDefault {
			listenAddr = defaultUnauthenticatedAddr
			say("without authentication and without --addr: listening on %s, this machine only (--addr %s listens on every interface)",
				listenAddr, defaultServeAddr)
		} else if !loopbackAddr(listenAddr) {
			fmt.Fprintf(errOut, "WARNING: --allow-unauthenticated with --addr %s: anyone who can reach this address controls every session.\n", listenAddr)
		}
	}
	// Listen first: a taken port fails before anything starts.
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", listenAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (pass another --addr)", listenAddr, err)
	}
	defer ln.Close()

	auth := server.Config{Authenticate: authenticator(tokens), AllowUnauthenticated: cfg.AllowUnauthenticated,
		DisableInspector: cfg.NoInspector}
	if cfg.AllowUnauthenticated {
		auth.Authenticate = nil
	}
	queue, err := cfg.queueConfig()
	if err != nil {
		return err
	}
	retention, err := cfg.retentionPolicy()
	if err != nil {
		return err
	}
	if retention == nil {
		say("no retention (--retention-completed, --retention-failed, --retention-aborted): sessions are kept until deleted")
	} else {
		say("retention: %s", describeRetention(retention))
	}
	if queue == nil {
		say("no queue (--queue %s): every session runs at once, in the process that receives it", queueOff)
	} else {
		say("sessions admitted through queue %s: %s", queue.Name, describeQueue(queue))
	}
	// Traces, when the OTEL_* environment asks for them (else none, at no
	// cost): flushed after the engine stopped.
	tp, service, err := newTracerProvider(ctx, os.Getenv)
	if err != nil {
		return err
	}
	var tracing trace.TracerProvider
	if tp != nil {
		tracing = tp
		defer func() {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(fctx); err != nil {
				fmt.Fprintf(errOut, "WARNING: flushing traces: %v\n", err)
			}
		}()
		say("traces: OTLP over HTTP (OTEL_* environment), service %s", service)
	}
	var srv *server.Server
	c, err := g.startEngine(ctx, url, engineOpts{
		tracerProvider: tracing,
		queue:          queue,
		retention:      retention,
		executorID:     cfg.ExecutorID,
		lease:          cfg.ExecutorLease,
		hibernateAfter: cfg.HibernateAfter,
		agents:         &cliAgentSet{all: file.All, file: file},
		skipMigrations: cfg.SkipMigrations,
		progress:       say,
		beforeLaunch: func(e *engine.Engine) error {
			chat, err := aisdk.NewHandler(e, aisdk.Options{
				Agents:       file.All,
				Authenticate: aisdk.ServerPrincipal, // the server authenticated the request
				Logger:       g.logger(),
			})
			if err != nil {
				return err
			}
			sc := auth
			sc.Agents, sc.Chat, sc.Logger = file.All, chat, g.logger()
			srv, err = server.New(e, sc)
			return err
		},
	})
	if err != nil {
		return err
	}
	httpSrv := newHTTPServer(srv.Handler())
	served := make(chan error, 1)
	go func() { served <- httpSrv.Serve(ln) }()

	addr := ln.Addr().String()
	if host, port, err := net.SplitHostPort(addr); err == nil && (host == "::" || host == "0.0.0.0") {
		addr = net.JoinHostPort("localhost", port)
	}
	fmt.Fprintf(out, "listening on http://%s (executor %s)\n", addr, c.id)
	printAgents(out, file)
	if cfg.AllowUnauthenticated {
		fmt.Fprintln(out, "authentication: none (--allow-unauthenticated)")
	} else {
		names := make([]string, len(tokens))
		for i, t := range tokens {
			names[i] = string(t.principal)
		}
		fmt.Fprintf(out, "authentication: bearer tokens for %s\n", strings.Join(names, ", "))
	}
	if !cfg.NoInspector {
		fmt.Fprintf(out, "inspector: http://%s/\n", addr)
	}
	fmt.Fprintf(out, "try: curl http://%s/start -H 'Content-Type: application/json' -d '{\"agentType\":\"%s\",\"message\":\"Hello\"}'%s\n",
		addr, file.All[0].Name, map[bool]string{true: "", false: " -H 'Authorization: Bearer <secret>'"}[cfg.AllowUnauthenticated])
	fmt.Fprintln(out, "stop with Ctrl-C (SIGINT) or SIGTERM")

	var serveErr error
	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "• shutting down: ending SSE streams, finishing requests, stopping the engine")
	case serveErr = <-served:
		fmt.Fprintf(out, "• the HTTP server stopped (%v): shutting down\n", serveErr)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	// The server first: its SSE responses never go idle, so net/http's
	// Shutdown would wait for them until its deadline.
	errs := []error{serveErr}
	if err := srv.Shutdown(sctx); err != nil {
		errs = append(errs, err)
	}
	if err := httpSrv.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", err))
	}
	c.shutdown(sctx)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(out, "stopped")
	return nil
}

// loopbackAddr reports whether a listen address is this machine's only
// (localhost, 127.0.0.1, ::1); an empty host is every interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// printAgents lists the served agents with their models and tools.
func printAgents(out io.Writer, file *agentfile.Agents) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "AGENT\tMODEL\tTOOLS")
	for i, a := range file.All {
		spec := file.File.Agents[i]
		model := spec.Model.Provider
		switch {
		case spec.Model.Script != "":
			model += " " + spec.Model.Script
		case spec.Model.Model != "":
			model += " " + spec.Model.Model
		}
		tools, _ := a.EffectiveTools()
		names := make([]string, len(tools))
		for j, t := range tools {
			names[j] = t.Name()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", a.Name, model, cmp.Or(strings.Join(names, ", "), "-"))
	}
	_ = w.Flush()
}
