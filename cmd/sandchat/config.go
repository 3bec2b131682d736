package main

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat/toolkits"
)

// Config is the whole process configuration. Every field has a flag and a SANDCHAT_*
// environment variable; the flag wins, then the variable, then the default, and every
// default works on a developer machine.
type Config struct {
	Addr            string
	DatabaseURL     string
	RedisURL        string
	RedisPrefix     string
	AllowedOrigins  []string
	ToolsDisabled   []string
	EventRetention  time.Duration
	ShutdownTimeout time.Duration
	LogLevel        string
	LogFormat       string
	// AdminTokenFile, when set, makes serve print a working admin token at start: the
	// one in the file if it still authenticates, else a new admin's, written there.
	AdminTokenFile string
	// WSQueueBytes bounds what may wait to be written to one WebSocket; a client that
	// falls further behind is disconnected and reconnects with since.
	WSQueueBytes int
	// Per-user limits per minute; 0 disables one.
	RateMessages   int
	RateExecutions int
	Sandbox        SandboxConfig
	LLM            LLMConfig
	// TurnStaleAfter: a running turn whose node has not renewed it for this long is
	// failed (its node crashed).
	TurnStaleAfter time.Duration
}

// LLMConfig selects the model behind agents.
type LLMConfig struct {
	Provider   string // builtin or openai: what agents without a model of their own use
	BaseURL    string
	APIKey     string
	Model      string
	MaxRetries int
}

// env reads SANDCHAT_<name> with a default.
func env(name, def string) string {
	if v, ok := os.LookupEnv("SANDCHAT_" + name); ok {
		return v
	}
	return def
}

// intSetting is an integer flag and variable kept as text until validation, so a bad
// value is reported as written, not as a number it was turned into.
type intSetting struct {
	name string
	dst  *int
	raw  string
}

func (v *intSetting) parse() error {
	n, err := strconv.Atoi(strings.TrimSpace(v.raw))
	if err != nil {
		return fmt.Errorf("SANDCHAT_%s: %q is not a whole number", v.name, v.raw)
	}
	*v.dst = n
	return nil
}

// list is a comma-separated flag value.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }
func (l *list) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// durationEnv parses a duration variable now, so a bad one stops the process with its
// name in the message.
type durationEnv struct {
	name     string
	dst      *time.Duration
	raw      string
	min, max time.Duration
}

// bind registers the flags every subcommand that talks to the stores shares.
func (c *Config) bind(fs *flag.FlagSet) (finish func() error) {
	fs.StringVar(&c.DatabaseURL, "database-url", env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sandchat?sslmode=disable"), "Postgres URL (SANDCHAT_DATABASE_URL)")
	fs.StringVar(&c.RedisURL, "redis-url", env("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL (SANDCHAT_REDIS_URL)")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", env("REDIS_PREFIX", "sandchat:"), "prefix of every Redis key and channel, so deployments sharing a Redis stay apart (SANDCHAT_REDIS_PREFIX)")
	fs.StringVar(&c.LogLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error (SANDCHAT_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", env("LOG_FORMAT", "text"), "text or json (SANDCHAT_LOG_FORMAT)")
	finishSandbox := c.Sandbox.bind(fs, &c.RedisPrefix)
	return func() error {
		if err := c.validate(); err != nil {
			return err
		}
		return finishSandbox()
	}
}

// bindServe registers the flags of serve.
func (c *Config) bindServe(fs *flag.FlagSet) (finish func() error) {
	finishCommon := c.bind(fs)
	fs.StringVar(&c.Addr, "addr", env("ADDR", "127.0.0.1:8080"), "listen address (SANDCHAT_ADDR)")
	c.AllowedOrigins = nil
	origins := list{}
	_ = origins.Set(env("ALLOWED_ORIGINS", ""))
	fs.Var(&origins, "allowed-origins", "comma-separated browser origins allowed to open WebSockets; default: the server's own (SANDCHAT_ALLOWED_ORIGINS)")
	disabled := list{}
	_ = disabled.Set(env("TOOLS_DISABLED", ""))
	fs.Var(&disabled, "tools-disabled", "comma-separated internal tool ids switched off for the whole deployment (SANDCHAT_TOOLS_DISABLED)")
	ints := []*intSetting{
		{name: "WS_QUEUE_BYTES", dst: &c.WSQueueBytes, raw: env("WS_QUEUE_BYTES", strconv.Itoa(4<<20))},
		{name: "RATE_MESSAGES", dst: &c.RateMessages, raw: env("RATE_MESSAGES", "30")},
		{name: "RATE_EXECUTIONS", dst: &c.RateExecutions, raw: env("RATE_EXECUTIONS", "120")},
		{name: "LLM_MAX_RETRIES", dst: &c.LLM.MaxRetries, raw: env("LLM_MAX_RETRIES", "2")},
	}
	intHelp := map[string]string{
		"WS_QUEUE_BYTES":  "bytes that may wait to be written to one WebSocket before it is dropped as too slow",
		"RATE_MESSAGES":   "messages one user may send per minute; 0: unlimited",
		"RATE_EXECUTIONS": "sandbox runs one user may start per minute; 0: unlimited",
		"LLM_MAX_RETRIES": "retries on 429/5xx",
	}
	for _, v := range ints {
		fs.StringVar(&v.raw, flagName(v.name), v.raw, fmt.Sprintf("%s (SANDCHAT_%s)", intHelp[v.name], v.name))
	}
	fs.StringVar(&c.LLM.Provider, "llm-provider", env("LLM_PROVIDER", "builtin"), "builtin (offline) or openai: the model of agents that name none (SANDCHAT_LLM_PROVIDER)")
	fs.StringVar(&c.LLM.BaseURL, "llm-base-url", env("LLM_BASE_URL", "https://api.openai.com/v1"), "OpenAI-compatible Chat Completions base URL (SANDCHAT_LLM_BASE_URL)")
	c.LLM.APIKey = env("LLM_API_KEY", "") // from the environment only: flags show in ps
	fs.StringVar(&c.LLM.Model, "llm-model", env("LLM_MODEL", "gpt-4o-mini"), "default model for the openai provider (SANDCHAT_LLM_MODEL)")
	fs.StringVar(&c.AdminTokenFile, "admin-token-file", env("ADMIN_TOKEN_FILE", ""), "print a working admin token at start, keeping it in this file (SANDCHAT_ADMIN_TOKEN_FILE)")
	// Bounds: events must outlive a reconnect; a turn is renewed every second, so a
	// stale limit of a few seconds is the least that does not fail live turns.
	durations := []*durationEnv{
		{name: "EVENT_RETENTION", dst: &c.EventRetention, raw: env("EVENT_RETENTION", "24h"), min: time.Minute, max: 365 * 24 * time.Hour},
		{name: "SHUTDOWN_TIMEOUT", dst: &c.ShutdownTimeout, raw: env("SHUTDOWN_TIMEOUT", "15s"), min: time.Second, max: time.Hour},
		{name: "TURN_STALE_AFTER", dst: &c.TurnStaleAfter, raw: env("TURN_STALE_AFTER", "30s"), min: 5 * time.Second, max: 24 * time.Hour},
	}
	for _, d := range durations {
		flagName := strings.ReplaceAll(strings.ToLower(d.name), "_", "-")
		fs.StringVar(&d.raw, flagName, d.raw, fmt.Sprintf("duration (SANDCHAT_%s)", d.name))
	}
	return func() error {
		c.AllowedOrigins, c.ToolsDisabled = origins, disabled
		for _, v := range ints {
			if err := v.parse(); err != nil {
				return err
			}
		}
		for _, d := range durations {
			v, err := time.ParseDuration(strings.TrimSpace(d.raw))
			if err != nil || v <= 0 {
				return fmt.Errorf("SANDCHAT_%s: %q is not a positive duration (e.g. 30s, 24h)", d.name, d.raw)
			}
			if v < d.min || v > d.max {
				return fmt.Errorf("SANDCHAT_%s: %s is out of range (%s to %s)", d.name, v, d.min, d.max)
			}
			*d.dst = v
		}
		known := toolkits.NewCatalogue(nil, nil)
		for _, id := range c.ToolsDisabled {
			if !known.Has(id) {
				return fmt.Errorf("SANDCHAT_TOOLS_DISABLED: %q is not an internal tool id (%s, %s)", id, toolkits.PyodideSandbox, toolkits.SwarmMode)
			}
		}
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			return fmt.Errorf("SANDCHAT_ADDR: %q is not host:port", c.Addr)
		}
		switch c.LLM.Provider {
		case "builtin":
		case "openai":
			if c.LLM.APIKey == "" {
				return fmt.Errorf("SANDCHAT_LLM_PROVIDER=openai needs SANDCHAT_LLM_API_KEY")
			}
		default:
			return fmt.Errorf("SANDCHAT_LLM_PROVIDER: %q is not builtin or openai", c.LLM.Provider)
		}
		if c.LLM.MaxRetries < 0 || c.LLM.MaxRetries > 10 {
			return fmt.Errorf("SANDCHAT_LLM_MAX_RETRIES: %d is not between 0 and 10", c.LLM.MaxRetries)
		}
		if c.RateMessages < 0 || c.RateExecutions < 0 {
			return fmt.Errorf("SANDCHAT_RATE_MESSAGES and SANDCHAT_RATE_EXECUTIONS must be 0 (unlimited) or positive")
		}
		if c.WSQueueBytes < 64<<10 {
			return fmt.Errorf("SANDCHAT_WS_QUEUE_BYTES: %d is below the 64 KiB minimum", c.WSQueueBytes)
		}
		for _, o := range c.AllowedOrigins {
			if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
				return fmt.Errorf("SANDCHAT_ALLOWED_ORIGINS: %q is not an origin like https://chat.example.com", o)
			}
		}
		return finishCommon()
	}
}

func (c *Config) validate() error {
	u, err := url.Parse(c.DatabaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return fmt.Errorf("SANDCHAT_DATABASE_URL: not a postgres:// URL")
	}
	if _, err := redis.ParseURL(c.RedisURL); err != nil {
		return fmt.Errorf("SANDCHAT_REDIS_URL: %v", err)
	}
	// Every key and channel lives under the prefix; an empty one would mix this
	// deployment's state with anything else in the Redis.
	if strings.TrimSpace(c.RedisPrefix) == "" {
		return fmt.Errorf("SANDCHAT_REDIS_PREFIX: must not be empty (e.g. sandchat:)")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("SANDCHAT_LOG_LEVEL: %q is not debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("SANDCHAT_LOG_FORMAT: %q is not text or json", c.LogFormat)
	}
	return nil
}
