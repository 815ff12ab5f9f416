package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/helix-agents/helix-dbos/internal/pgtest"
)

// writeFile writes a file in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// configOf runs `config --json` and returns the settings by name.
func configOf(t *testing.T, o binOpts, args ...string) (string, map[string]configReportSetting) {
	t.Helper()
	var rep configReport
	out := mustBin(t, o, append([]string{"config", "--json"}, args...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	byName := map[string]configReportSetting{}
	for _, s := range rep.Settings {
		byName[s.Name] = s
	}
	return rep.File, byName
}

// One setting, one name: flag > environment > file > default.
func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, defaultConfigFile, `
addr: ":1111"
executor-id: from-file
auth-token: [alice:s3cret, bob:hunter2]
skip-migrations: true
shutdown-timeout: 3s
executor-lease: 45s
`)
	o := binOpts{dir: dir}

	file, c := configOf(t, o)
	require.Equal(t, defaultConfigFile, file, "./helix-dbos.yaml is read when present")
	require.Equal(t, ":1111", c["addr"].Value)
	require.Equal(t, configSource{Kind: sourceFile, Where: defaultConfigFile}, c["addr"].Source)
	require.Equal(t, "HELIX_ADDR", c["addr"].Env)
	require.Equal(t, []any{"alice:***", "bob:***"}, c["auth-token"].Value, "secrets are redacted")
	require.Equal(t, true, c["skip-migrations"].Value)
	require.Equal(t, "3s", c["shutdown-timeout"].Value)
	require.Equal(t, "45s", c["executor-lease"].Value)
	require.Equal(t, configSource{Kind: sourceFile, Where: defaultConfigFile}, c["executor-lease"].Source)
	require.Equal(t, "HELIX_EXECUTOR_LEASE", c["executor-lease"].Env)
	require.Equal(t, sourceUnset, c["agents"].Source.Kind)

	o.env = []string{"HELIX_ADDR=:2222", "HELIX_AUTH_TOKEN=carol:x, dave:y", "HELIX_SKIP_MIGRATIONS=false", "HELIX_EXECUTOR_LEASE=1m"}
	_, c = configOf(t, o)
	require.Equal(t, ":2222", c["addr"].Value, "the environment beats the file")
	require.Equal(t, configSource{Kind: sourceEnv, Where: "HELIX_ADDR"}, c["addr"].Source)
	require.Equal(t, []any{"carol:***", "dave:***"}, c["auth-token"].Value, "a list is comma-separated in the environment")
	require.Equal(t, false, c["skip-migrations"].Value)
	require.Equal(t, "from-file", c["executor-id"].Value, "what the environment does not set still comes from the file")
	require.Equal(t, "1m0s", c["executor-lease"].Value)
	require.Equal(t, configSource{Kind: sourceEnv, Where: "HELIX_EXECUTOR_LEASE"}, c["executor-lease"].Source)

	_, c = configOf(t, o, "--addr", ":3333", "--auth-token", "erin:z", "--skip-migrations", "--executor-lease", "2s")
	require.Equal(t, ":3333", c["addr"].Value, "a flag beats both")
	require.Equal(t, configSource{Kind: sourceFlag, Where: "--addr"}, c["addr"].Source)
	require.Equal(t, []any{"erin:***"}, c["auth-token"].Value)
	require.Equal(t, true, c["skip-migrations"].Value)
	require.Equal(t, "2s", c["executor-lease"].Value)
	require.Equal(t, configSource{Kind: sourceFlag, Where: "--executor-lease"}, c["executor-lease"].Source)
	_, c = configOf(t, o, "--executor-lease", "0s")
	require.Equal(t, "", c["executor-lease"].Value, "0 is the engine's default")

	// The text form names each source.
	out := mustBin(t, o, "config", "--executor-id", "cli")
	require.Contains(t, out, "config file: helix-dbos.yaml\n")
	require.Regexp(t, `(?m)^addr\s+HELIX_ADDR\s+:2222\s+env HELIX_ADDR$`, out)
	require.Regexp(t, `(?m)^executor-id\s+HELIX_EXECUTOR_ID\s+cli\s+flag --executor-id$`, out)
	require.Regexp(t, `(?m)^shutdown-timeout\s+HELIX_SHUTDOWN_TIMEOUT\s+3s\s+file helix-dbos.yaml$`, out)
	require.Regexp(t, `(?m)^executor-lease\s+HELIX_EXECUTOR_LEASE\s+1m0s\s+env HELIX_EXECUTOR_LEASE$`, out)

	// A path in the file is relative to the file.
	sub := filepath.Join(dir, "conf")
	writeFile(t, sub, "helix.yaml", "agents: agents.yaml\n")
	_, c = configOf(t, binOpts{dir: dir}, "--config", "conf/helix.yaml")
	require.Equal(t, filepath.Join("conf", "agents.yaml"), c["agents"].Value)
	_, c = configOf(t, binOpts{dir: dir}, "--config", "conf/helix.yaml", "--agents", "mine.yaml")
	require.Equal(t, "mine.yaml", c["agents"].Value, "a flag is relative to the working directory")

	// HELIX_CONFIG names another file; --config beats it.
	other := writeFile(t, dir, "other.yaml", "addr: \":4444\"\n")
	third := writeFile(t, dir, "third.yaml", "addr: \":5555\"\n")
	file, c = configOf(t, binOpts{dir: dir, env: []string{"HELIX_CONFIG=" + other}})
	require.Equal(t, other, file)
	require.Equal(t, ":4444", c["addr"].Value)
	require.Empty(t, c["executor-id"].Value, "the default file is not read when another is named")
	file, c = configOf(t, binOpts{dir: dir, env: []string{"HELIX_CONFIG=" + other}}, "--config", third)
	require.Equal(t, third, file)
	require.Equal(t, ":5555", c["addr"].Value)
}

// The database URL goes through the same layers, and the commands use it.
func TestDatabaseURLPrecedence(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	bad := "postgres://nobody:wrong@127.0.0.1:1/none?connect_timeout=2"
	list := []string{"sessions", "list"}

	dir := t.TempDir()
	writeFile(t, dir, defaultConfigFile, "database-url: "+url+"\n")
	require.Equal(t, "no sessions\n", mustBin(t, binOpts{dir: dir}, list...), "from the file")

	r := runBin(t, binOpts{dir: dir, env: []string{"HELIX_DATABASE_URL=" + bad}}, list...)
	require.Equal(t, 1, r.code, "the environment beats the file: %s", r)
	require.Contains(t, r.stderr, "127.0.0.1")

	require.Equal(t, "no sessions\n", mustBin(t, binOpts{dir: dir, env: []string{"HELIX_DATABASE_URL=" + bad}},
		append(list, "--database-url", url)...), "the flag beats the environment")

	badDir := t.TempDir()
	writeFile(t, badDir, defaultConfigFile, "database-url: "+bad+"\n")
	require.Equal(t, "no sessions\n", mustBin(t, binOpts{dir: badDir, env: []string{"HELIX_DATABASE_URL=" + url}}, list...),
		"the environment beats the file")

	r = runBin(t, binOpts{}, list...)
	require.Equal(t, 1, r.code)
	require.Equal(t, "helix-dbos: no database: pass --database-url postgres://user:pass@host:5432/db, set HELIX_DATABASE_URL, "+
		"or put database-url: in the config file (helix-dbos.yaml)\n", r.stderr)
}

// Configuration mistakes are reported with where they are.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		file string
		env  []string
		args []string // after the command (default: sessions list)
		cmd  []string
		want string
	}{
		{name: "unknown key", file: "databse-url: x\n",
			want: `helix-dbos: config file helix-dbos.yaml: unknown key "databse-url" (known keys: database-url, verbose, executor-id, executor-lease, agents, addr, auth-token, allow-unauthenticated, skip-migrations, no-inspector, shutdown-timeout, hibernate-after, queue, queue-concurrency, queue-global-concurrency, queue-partition-concurrency, queue-partition-worker-concurrency, queue-rate-limit, queue-polling-interval, retention-completed, retention-failed, retention-aborted, retention-keep-expired, retention-interval, retention-batch)`},
		{name: "nested key", file: "serve:\n  addr: x\n", want: `unknown key "serve.addr"`},
		{name: "config in the file", file: "config: other.yaml\n", want: `"config" cannot be set in a config file (use --config or HELIX_CONFIG)`},
		{name: "bool", file: "verbose: yes please\n", want: `config file helix-dbos.yaml: verbose: want true or false, got yes please`},
		{name: "duration", file: "shutdown-timeout: 3\n", want: `config file helix-dbos.yaml: shutdown-timeout: want a duration such as "15s", got 3`},
		{name: "lease", file: "executor-lease: 500ms\n",
			want: `helix-dbos: config file helix-dbos.yaml: executor-lease: want a duration of at least 1s, or 0 for the default 30s; got 500ms`},
		{name: "lease not a duration", file: "executor-lease: 30\n", want: `config file helix-dbos.yaml: executor-lease: want a duration such as "15s", got 30`},
		{name: "env lease", env: []string{"HELIX_EXECUTOR_LEASE=-5s"},
			want: `helix-dbos: environment variable HELIX_EXECUTOR_LEASE: want a duration of at least 1s, or 0 for the default 30s; got -5s`},
		{name: "flag lease", cmd: []string{"serve"}, args: []string{"--executor-lease", "999ms"},
			want: `helix-dbos: --executor-lease: want a duration of at least 1s, or 0 for the default 30s; got 999ms`},
		{name: "list", file: "auth-token: {a: b}\n", want: `config file helix-dbos.yaml: auth-token: want a value, not a mapping`},
		{name: "not YAML", file: "addr: [\n", want: `config file helix-dbos.yaml:`},
		{name: "env bool", env: []string{"HELIX_VERBOSE=sometimes"}, want: `environment variable HELIX_VERBOSE: want true or false (or 1/0), got "sometimes"`},
		{name: "missing file", args: []string{"--config", "nope.yaml"}, want: `config file nope.yaml (from --config) does not exist`},
		{name: "missing env file", env: []string{"HELIX_CONFIG=nope.yaml"}, want: `config file nope.yaml (from HELIX_CONFIG) does not exist`},
		{name: "int", file: "queue-concurrency: many\n", want: `config file helix-dbos.yaml: queue-concurrency: want a whole number, got many`},
		{name: "negative int", env: []string{"HELIX_QUEUE_CONCURRENCY=-1"}, want: `environment variable HELIX_QUEUE_CONCURRENCY: want 0 or more, got -1`},
		{name: "rate limit", cmd: []string{"serve"}, args: []string{"--queue-rate-limit", "60 per minute"},
			want: `helix-dbos: --queue-rate-limit: want N/PERIOD with N a positive number, such as 60/1m, got "60 per minute"`},
		{name: "rate period", file: "queue-rate-limit: 60/soon\n",
			want: `config file helix-dbos.yaml: queue-rate-limit: want N/PERIOD with PERIOD a positive duration, such as 60/1m, got "60/soon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := filepath.Join(dir, tc.name)
			require.NoError(t, os.MkdirAll(d, 0o755))
			if tc.file != "" {
				writeFile(t, d, defaultConfigFile, tc.file)
			}
			cmd := tc.cmd
			if cmd == nil {
				cmd = []string{"sessions", "list"}
			}
			r := runBin(t, binOpts{dir: d, env: tc.env}, append(cmd, tc.args...)...)
			require.Equal(t, 1, r.code, "%s", r)
			require.Contains(t, r.stderr, tc.want)
		})
	}
}

// No password reaches the output, whichever form the database URL holds it
// in, and no secret of an auth token, even one without a name.
func TestConfigRedactsSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, url, want string }{
		{"URL", "postgres://helix:pw123@db.internal:6432/app", "host=db.internal port=6432 user=helix database=app"},
		{"URL query", "postgres://helix@db.internal/app?password=pw123&sslmode=disable", "host=db.internal port=5432 user=helix database=app"},
		{"key=value", "host=db.internal port=6432 user=helix password=pw123 dbname=app", "host=db.internal port=6432 user=helix database=app"},
		{"key=value quoted", "host=db.internal user='helix' password='pw123 x' dbname='my app'", "host=db.internal port=5432 user=helix database='my app'"},
		{"several hosts", "postgres://helix:pw123@db1:5432,db2:5433/app", "host=db1,db2 port=5432,5433 user=helix database=app"},
		{"unparsable URL", "postgres://helix:pw123@db.internal:port/app", maskedDatabase},
		{"unparsable key=value", "host=db.internal password=pw123 oops", maskedDatabase},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFile(t, dir, defaultConfigFile, "database-url: \""+tc.url+"\"\n")
			for _, o := range []binOpts{{env: []string{"HELIX_DATABASE_URL=" + tc.url}}, {dir: dir}} {
				_, c := configOf(t, o)
				require.Equal(t, tc.want, c["database-url"].Value)
				out := mustBin(t, o, "config")
				require.Regexp(t, `(?m)^database-url\s+HELIX_DATABASE_URL\s+`+regexp.QuoteMeta(tc.want)+`\s+(env|file) `, out)
				require.NotContains(t, out, "pw123")
			}
		})
	}

	out := mustBin(t, binOpts{env: []string{"HELIX_AUTH_TOKEN=s3cretvalue,bob:hunter2"}}, "config", "--json")
	require.NotContains(t, out, "s3cret", "a token without a colon may be a bare secret")
	require.NotContains(t, out, "hunter2")
	_, c := configOf(t, binOpts{}, "--auth-token", "s3cretvalue", "--auth-token", "alice:s3cret")
	require.Equal(t, []any{"***", "alice:***"}, c["auth-token"].Value)
	out = mustBin(t, binOpts{}, "config", "--auth-token", "s3cretvalue")
	require.Regexp(t, `(?m)^auth-token\s+HELIX_AUTH_TOKEN\s+\*\*\*\s+flag --auth-token$`, out)
	require.NotContains(t, out, "s3cret")
}
