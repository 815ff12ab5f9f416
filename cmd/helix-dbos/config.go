package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/helix-agents/helix-dbos/engine"
)

// Configuration comes from flags, the environment and a YAML file, in that
// precedence, then each command's flag defaults. A setting has one name
// everywhere: the flag --database-url, the environment variable
// HELIX_DATABASE_URL and the file key database-url.

// envPrefix starts the environment variable of every setting.
const envPrefix = "HELIX_"

// defaultConfigFile is read from the working directory when it exists and
// neither --config nor HELIX_CONFIG names a file.
const defaultConfigFile = "helix-dbos.yaml"

// configFlag names the file to read; it is a flag and HELIX_CONFIG, not a
// file key.
const configFlag = "config"

// settingKind is the type of a setting's value.
type settingKind int

const (
	kindString settingKind = iota
	kindBool
	kindList // several values: a repeated flag, a YAML list, comma-separated in the environment
	kindDuration
	kindInt
)

// setting is one configuration key.
type setting struct {
	name string
	kind settingKind
	// secret values are redacted by `helix-dbos config`.
	secret bool
	help   string
	// check, when set, validates a value of the setting (of its kind's
	// type) wherever it comes from: flag, environment or file.
	check func(v any) error
}

// settings are the configuration keys, in the order `config` prints them.
var settings = []setting{
	{name: "database-url", secret: true, help: "Postgres URL of the database your engines use"},
	{name: "verbose", kind: kindBool, help: "print engine logs on stderr"},
	{name: "executor-id", help: "serve: the DBOS executor ID of the server's engine (resume and retry take --executor-id from their command line only)"},
	{name: "executor-lease", kind: kindDuration, check: checkExecutorLease,
		help: "serve: how long the engine's sessions stay its own without a heartbeat before a live engine takes them over"},
	{name: "agents", help: "agent file (YAML) defining the agents serve runs and resume/retry can continue"},
	{name: "addr", help: "serve: the address to listen on"},
	{name: "auth-token", kind: kindList, secret: true, help: "serve: a bearer token, as principal:secret (several allowed)"},
	{name: "allow-unauthenticated", kind: kindBool, help: "serve: accept requests without a token (development only)"},
	{name: "skip-migrations", kind: kindBool, help: "serve: do not run the helix migrations at start"},
	{name: "no-inspector", kind: kindBool, help: "serve: do not serve the web inspector at / and /inspector/"},
	{name: "shutdown-timeout", kind: kindDuration, help: "serve: how long a graceful shutdown may take"},
	{name: "hibernate-after", kind: kindDuration,
		help: "serve: how long a session waits for people in its workflow before it hibernates (0: the default, 1m; negative: never)"},
	{name: "queue", check: checkQueueName, help: "serve: the DBOS queue that admits sessions (" + queueOff + ": run each at once)"},
	{name: "queue-concurrency", kind: kindInt, check: checkNonNegative, help: "serve: queued sessions one process runs at once"},
	{name: "queue-global-concurrency", kind: kindInt, check: checkNonNegative, help: "serve: queued sessions the cluster runs at once (0: no cap)"},
	{name: "queue-partition-concurrency", kind: kindInt, check: checkNonNegative,
		help: "serve: sessions of one principal the cluster runs at once (0: no cap)"},
	{name: "queue-partition-worker-concurrency", kind: kindInt, check: checkNonNegative,
		help: "serve: sessions of one principal one process runs at once (0: queue-concurrency)"},
	{name: "queue-rate-limit", check: checkRateLimit, help: "serve: at most N segment starts per period, as N/PERIOD (60/1m): a model provider's limit"},
	{name: "queue-polling-interval", kind: kindDuration, help: "serve: how often each process polls the queue"},
	{name: "retention-completed", check: checkAge, help: "serve: delete completed sessions whose last activity is older (30d, 12h; empty: keep forever)"},
	{name: "retention-failed", check: checkAge, help: "serve: delete failed sessions whose last activity is older (empty: keep forever)"},
	{name: "retention-aborted", check: checkAge, help: "serve: delete aborted sessions whose last activity is older (empty: keep forever)"},
	{name: "retention-keep-expired", kind: kindBool, help: "serve: with a retention age set, keep sessions past their expiresAt instead of deleting them"},
	{name: "retention-interval", kind: kindDuration, help: "serve: time between two retention passes"},
	{name: "retention-batch", kind: kindInt, check: checkNonNegative, help: "serve: session trees a retention pass deletes per transaction"},
}

// config is the merged configuration of a command.
type config struct {
	DatabaseURL          string        `koanf:"database-url"`
	Verbose              bool          `koanf:"verbose"`
	ExecutorID           string        `koanf:"executor-id"`
	ExecutorLease        time.Duration `koanf:"executor-lease"`
	Agents               string        `koanf:"agents"`
	Addr                 string        `koanf:"addr"`
	AuthTokens           []string      `koanf:"auth-token"`
	AllowUnauthenticated bool          `koanf:"allow-unauthenticated"`
	SkipMigrations       bool          `koanf:"skip-migrations"`
	NoInspector          bool          `koanf:"no-inspector"`
	ShutdownTimeout      time.Duration `koanf:"shutdown-timeout"`
	HibernateAfter       time.Duration `koanf:"hibernate-after"`

	Queue                           string        `koanf:"queue"`
	QueueConcurrency                int           `koanf:"queue-concurrency"`
	QueueGlobalConcurrency          int           `koanf:"queue-global-concurrency"`
	QueuePartitionConcurrency       int           `koanf:"queue-partition-concurrency"`
	QueuePartitionWorkerConcurrency int           `koanf:"queue-partition-worker-concurrency"`
	QueueRateLimit                  string        `koanf:"queue-rate-limit"`
	QueuePollingInterval            time.Duration `koanf:"queue-polling-interval"`

	RetentionCompleted   string        `koanf:"retention-completed"`
	RetentionFailed      string        `koanf:"retention-failed"`
	RetentionAborted     string        `koanf:"retention-aborted"`
	RetentionKeepExpired bool          `koanf:"retention-keep-expired"`
	RetentionInterval    time.Duration `koanf:"retention-interval"`
	RetentionBatch       int           `koanf:"retention-batch"`
}

// checkExecutorLease accepts a lease of at least engine.MinExecutorLease,
// or 0 for the engine's default.
func checkExecutorLease(v any) error {
	if d, ok := v.(time.Duration); ok && d != 0 && d < engine.MinExecutorLease {
		return fmt.Errorf("want a duration of at least %s, or 0 for the default %s; got %s", engine.MinExecutorLease, engine.DefaultExecutorLease, d)
	}
	return nil
}

func lookupSetting(name string) (setting, bool) {
	i := slices.IndexFunc(settings, func(s setting) bool { return s.name == name })
	if i < 0 {
		return setting{}, false
	}
	return settings[i], true
}

// envName returns the environment variable of a setting.
func envName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

func settingNames() []string {
	names := make([]string, len(settings))
	for i, s := range settings {
		names[i] = s.name
	}
	return names
}

// Sources of a setting's value (configSource.Kind).
const (
	sourceFlag    = "flag"
	sourceEnv     = "env"
	sourceFile    = "file"
	sourceDefault = "default"
	sourceUnset   = "unset"
)

// configSource says where a setting's value came from.
type configSource struct {
	Kind string `json:"kind"`
	// Where names the flag, the variable or the file.
	Where string `json:"where,omitempty"`
}

// loadConfig merges the configuration of cmd into g.cfg: the flags cmd was
// given, the HELIX_* environment, the config file, then cmd's flag
// defaults. It runs before every command (the root's PersistentPreRunE).
func (g *globals) loadConfig(cmd *cobra.Command) error {
	flags := cmd.Flags()
	path, explicit, err := configPath(flags)
	if err != nil {
		return err
	}
	fileK := koanf.New(".")
	if path != "" {
		if err := loadConfigFile(fileK, path, explicit); err != nil {
			return err
		}
	}
	envK := koanf.New(".")
	var envErr error
	if err := envK.Load(env.Provider(".", env.Opt{
		Prefix: envPrefix,
		TransformFunc: func(k, v string) (string, any) {
			key := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, envPrefix), "_", "-"))
			s, ok := lookupSetting(key)
			if !ok || v == "" { // an empty variable is unset
				return "", nil
			}
			val, err := parseEnvValue(s, v)
			if err == nil && s.check != nil {
				err = s.check(val)
			}
			if err != nil && envErr == nil {
				envErr = fmt.Errorf("environment variable %s: %w", k, err)
			}
			return key, val
		},
	}), nil); err != nil {
		return err
	}
	if envErr != nil {
		return envErr
	}

	k := koanf.New(".")
	if err := k.Merge(fileK); err != nil {
		return err
	}
	if err := k.Merge(envK); err != nil {
		return err
	}
	// A flag's value is checked like the environment's and the file's.
	for _, s := range settings {
		if s.check == nil || !changed(flags, s.name) {
			continue
		}
		if err := s.check(posflag.FlagVal(flags, flags.Lookup(s.name))); err != nil {
			return fmt.Errorf("--%s: %w", s.name, err)
		}
	}
	// Changed flags override; the defaults of the command's own flags fill
	// the keys nothing else set.
	if err := k.Load(posflag.ProviderWithFlag(flags, ".", k, func(f *pflag.Flag) (string, any) {
		if _, ok := lookupSetting(f.Name); !ok {
			return "", nil
		}
		return f.Name, posflag.FlagVal(flags, f)
	}), nil); err != nil {
		return err
	}
	g.cfg = config{}
	if err := k.Unmarshal("", &g.cfg); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	// A path in the config file is relative to the file, not to the
	// working directory.
	if fileK.Exists("agents") && !envK.Exists("agents") && !changed(flags, "agents") && g.cfg.Agents != "" && !filepath.IsAbs(g.cfg.Agents) {
		g.cfg.Agents = filepath.Join(filepath.Dir(path), g.cfg.Agents)
	}
	g.cfgFile = path
	g.sources = map[string]configSource{}
	for _, s := range settings {
		src := configSource{Kind: sourceUnset}
		f := flags.Lookup(s.name)
		switch {
		case f != nil && f.Changed:
			src = configSource{Kind: sourceFlag, Where: "--" + s.name}
		case envK.Exists(s.name):
			src = configSource{Kind: sourceEnv, Where: envName(s.name)}
		case fileK.Exists(s.name):
			src = configSource{Kind: sourceFile, Where: path}
		case f != nil && !slices.Contains([]string{"", "[]", "0s", "0"}, f.DefValue):
			src = configSource{Kind: sourceDefault}
		}
		g.sources[s.name] = src
	}
	return nil
}

func changed(flags *pflag.FlagSet, name string) bool {
	f := flags.Lookup(name)
	return f != nil && f.Changed
}

// configPath returns the config file to read: --config, HELIX_CONFIG, or
// ./helix-dbos.yaml when it exists ("" for none). explicit is true when
// the file was named, so it must exist.
func configPath(flags *pflag.FlagSet) (path string, explicit bool, err error) {
	if f := flags.Lookup(configFlag); f != nil && f.Changed {
		if f.Value.String() == "" {
			return "", false, errors.New("--config needs a file name")
		}
		return f.Value.String(), true, nil
	}
	if p := os.Getenv(envName(configFlag)); p != "" {
		return p, true, nil
	}
	if _, err := os.Stat(defaultConfigFile); err == nil {
		return defaultConfigFile, false, nil
	}
	return "", false, nil
}

// loadConfigFile reads a YAML config file into k, checking every key and
// value.
func loadConfigFile(k *koanf.Koanf, path string, explicit bool) error {
	via := "--config"
	if os.Getenv(envName(configFlag)) != "" {
		via = envName(configFlag)
	}
	if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
		if errors.Is(err, fs.ErrNotExist) && explicit {
			return fmt.Errorf("config file %s (from %s) does not exist", path, via)
		}
		return fmt.Errorf("config file %s: %w", path, err)
	}
	for _, key := range k.Keys() {
		s, ok := lookupSetting(key)
		if !ok {
			if key == configFlag {
				return fmt.Errorf("config file %s: %q cannot be set in a config file (use --config or %s)", path, key, envName(configFlag))
			}
			if parent, _, nested := strings.Cut(key, "."); nested {
				if _, ok := lookupSetting(parent); ok {
					return fmt.Errorf("config file %s: %s: want a value, not a mapping", path, parent)
				}
			}
			return fmt.Errorf("config file %s: unknown key %q (known keys: %s)", path, key, strings.Join(settingNames(), ", "))
		}
		val, err := fileValue(s, k.Get(key))
		if err == nil && s.check != nil {
			err = s.check(val)
		}
		if err != nil {
			return fmt.Errorf("config file %s: %s: %w", path, key, err)
		}
		if err := k.Set(key, val); err != nil {
			return err
		}
	}
	return nil
}

// fileValue checks a value of the config file and returns it in its
// setting's type.
func fileValue(s setting, v any) (any, error) {
	switch s.kind {
	case kindBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return nil, fmt.Errorf("want true or false, got %v", v)
	case kindList:
		switch v := v.(type) {
		case string:
			return []string{v}, nil
		case []any:
			out := make([]string, len(v))
			for i, e := range v {
				str, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("item %d: want a string, got %v", i, e)
				}
				out[i] = str
			}
			return out, nil
		}
		return nil, fmt.Errorf("want a string or a list of strings, got %v", v)
	case kindInt:
		switch n := v.(type) {
		case int:
			return n, nil
		case int64:
			return int(n), nil
		case float64:
			if n == float64(int(n)) {
				return int(n), nil
			}
		}
		return nil, fmt.Errorf("want a whole number, got %v", v)
	case kindDuration:
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want a duration such as \"15s\", got %v", v)
		}
		d, err := time.ParseDuration(str)
		if err != nil {
			return nil, fmt.Errorf("want a duration such as \"15s\": %w", err)
		}
		return d, nil
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case int, int64, float64:
		return fmt.Sprint(v), nil
	}
	return nil, fmt.Errorf("want a string, got %v", v)
}

// parseEnvValue converts an environment variable's value to its setting's
// type.
func parseEnvValue(s setting, v string) (any, error) {
	switch s.kind {
	case kindBool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("want true or false (or 1/0), got %q", v)
		}
		return b, nil
	case kindList:
		var out []string
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out, nil
	case kindDuration:
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("want a duration such as \"15s\": %w", err)
		}
		return d, nil
	case kindInt:
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("want a whole number, got %q", v)
		}
		return n, nil
	}
	return v, nil
}

// configReport is what `config --json` prints.
type configReport struct {
	File     string                `json:"file,omitempty"`
	Settings []configReportSetting `json:"settings"`
}

type configReportSetting struct {
	Name   string       `json:"name"`
	Env    string       `json:"env"`
	Value  any          `json:"value"`
	Source configSource `json:"source"`
}

func newConfigCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show the effective configuration and where each value comes from",
		Long: "Prints every setting with its value (secrets redacted) and its source. A setting has one\n" +
			"name everywhere: the flag --NAME, the environment variable HELIX_NAME (upper case, '-' as\n" +
			"'_') and the key NAME in the config file. Precedence: flags, then the environment, then the\n" +
			"file, then each command's default. The file is --config FILE, else HELIX_CONFIG, else\n" +
			"./" + defaultConfigFile + " when it exists.\n\n" +
			"This command accepts every setting as a flag, so it also shows what a flag would change.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep := configReport{File: g.cfgFile, Settings: []configReportSetting{}}
			for _, s := range settings {
				rep.Settings = append(rep.Settings, configReportSetting{Name: s.name, Env: envName(s.name),
					Value: g.shownValue(s), Source: g.sources[s.name]})
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), rep)
			}
			printConfig(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	f := cmd.Flags()
	// Every setting as a flag without a default: the report then shows
	// only what was configured.
	f.String("executor-id", "", "")
	f.Duration("executor-lease", 0, "")
	f.String("agents", "", "")
	f.String("addr", "", "")
	f.StringArray("auth-token", nil, "")
	f.Bool("allow-unauthenticated", false, "")
	f.Bool("skip-migrations", false, "")
	f.Bool("no-inspector", false, "")
	f.Duration("shutdown-timeout", 0, "")
	f.Duration("hibernate-after", 0, "")
	addQueueFlags(f, true)
	addRetentionFlags(f, true)
	for _, s := range settings {
		if fl := f.Lookup(s.name); fl != nil {
			fl.Usage = s.help
		}
	}
	f.BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// shownValue returns a setting's value for `config`, secrets redacted.
func (g *globals) shownValue(s setting) any {
	c := g.cfg
	switch s.name {
	case "database-url":
		if c.DatabaseURL == "" {
			return ""
		}
		return describeDatabase(c.DatabaseURL)
	case "verbose":
		return c.Verbose
	case "executor-id":
		return c.ExecutorID
	case "executor-lease":
		if c.ExecutorLease == 0 {
			return ""
		}
		return c.ExecutorLease.String()
	case "agents":
		return c.Agents
	case "addr":
		return c.Addr
	case "auth-token":
		out := []string{}
		for _, t := range c.AuthTokens {
			out = append(out, redactToken(t))
		}
		return out
	case "allow-unauthenticated":
		return c.AllowUnauthenticated
	case "skip-migrations":
		return c.SkipMigrations
	case "no-inspector":
		return c.NoInspector
	case "hibernate-after":
		if c.HibernateAfter == 0 {
			return ""
		}
		return c.HibernateAfter.String()
	case "shutdown-timeout":
		if c.ShutdownTimeout == 0 {
			return ""
		}
		return c.ShutdownTimeout.String()
	case "queue":
		return c.Queue
	case "queue-concurrency":
		return c.QueueConcurrency
	case "queue-global-concurrency":
		return c.QueueGlobalConcurrency
	case "queue-partition-concurrency":
		return c.QueuePartitionConcurrency
	case "queue-partition-worker-concurrency":
		return c.QueuePartitionWorkerConcurrency
	case "queue-rate-limit":
		return c.QueueRateLimit
	case "queue-polling-interval":
		if c.QueuePollingInterval == 0 {
			return ""
		}
		return c.QueuePollingInterval.String()
	case "retention-completed":
		return c.RetentionCompleted
	case "retention-failed":
		return c.RetentionFailed
	case "retention-aborted":
		return c.RetentionAborted
	case "retention-keep-expired":
		return c.RetentionKeepExpired
	case "retention-interval":
		if c.RetentionInterval == 0 {
			return ""
		}
		return c.RetentionInterval.String()
	case "retention-batch":
		return c.RetentionBatch
	}
	return nil
}

func printConfig(out io.Writer, rep configReport) {
	if rep.File != "" {
		fmt.Fprintf(out, "config file: %s\n", rep.File)
	} else {
		fmt.Fprintf(out, "config file: none (--config FILE, %s, or ./%s)\n", envName(configFlag), defaultConfigFile)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SETTING\tENV\tVALUE\tSOURCE")
	for _, s := range rep.Settings {
		val := fmt.Sprint(s.Value)
		if l, ok := s.Value.([]string); ok {
			val = strings.Join(l, ",")
		}
		if val == "" {
			val = "-"
		}
		src := s.Source.Kind
		switch s.Source.Kind {
		case sourceFlag, sourceEnv, sourceFile:
			src += " " + s.Source.Where
		case sourceUnset:
			src = "unset (each command's default applies)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Name, s.Env, val, src)
	}
	_ = w.Flush()
}
