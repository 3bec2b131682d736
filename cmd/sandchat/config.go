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

// envInt reads an integer variable; a malformed one becomes -1, which validation refuses.
func envInt(name string, def int) int {
	v, ok := os.LookupEnv("SANDCHAT_" + name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return -1
	}
	return n
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
	name string
	dst  *time.Duration
	raw  string
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
	fs.IntVar(&c.WSQueueBytes, "ws-queue-bytes", envInt("WS_QUEUE_BYTES", 4<<20), "bytes that may wait to be written to one WebSocket before it is dropped as too slow (SANDCHAT_WS_QUEUE_BYTES)")
	fs.IntVar(&c.RateMessages, "rate-messages", envInt("RATE_MESSAGES", 30), "messages one user may send per minute; 0: unlimited (SANDCHAT_RATE_MESSAGES)")
	fs.IntVar(&c.RateExecutions, "rate-executions", envInt("RATE_EXECUTIONS", 120), "sandbox runs one user may start per minute; 0: unlimited (SANDCHAT_RATE_EXECUTIONS)")
	fs.StringVar(&c.LLM.Provider, "llm-provider", env("LLM_PROVIDER", "builtin"), "builtin (offline) or openai: the model of agents that name none (SANDCHAT_LLM_PROVIDER)")
	fs.StringVar(&c.LLM.BaseURL, "llm-base-url", env("LLM_BASE_URL", "https://api.openai.com/v1"), "OpenAI-compatible Chat Completions base URL (SANDCHAT_LLM_BASE_URL)")
	c.LLM.APIKey = env("LLM_API_KEY", "") // from the environment only: flags show in ps
	fs.StringVar(&c.LLM.Model, "llm-model", env("LLM_MODEL", "gpt-4o-mini"), "default model for the openai provider (SANDCHAT_LLM_MODEL)")
	fs.IntVar(&c.LLM.MaxRetries, "llm-max-retries", envInt("LLM_MAX_RETRIES", 2), "retries on 429/5xx (SANDCHAT_LLM_MAX_RETRIES)")
	fs.StringVar(&c.AdminTokenFile, "admin-token-file", env("ADMIN_TOKEN_FILE", ""), "print a working admin token at start, keeping it in this file (SANDCHAT_ADMIN_TOKEN_FILE)")
	durations := []*durationEnv{
		{name: "EVENT_RETENTION", dst: &c.EventRetention, raw: env("EVENT_RETENTION", "24h")},
		{name: "SHUTDOWN_TIMEOUT", dst: &c.ShutdownTimeout, raw: env("SHUTDOWN_TIMEOUT", "15s")},
		{name: "TURN_STALE_AFTER", dst: &c.TurnStaleAfter, raw: env("TURN_STALE_AFTER", "30s")},
	}
	for _, d := range durations {
		flagName := strings.ReplaceAll(strings.ToLower(d.name), "_", "-")
		fs.StringVar(&d.raw, flagName, d.raw, fmt.Sprintf("duration (SANDCHAT_%s)", d.name))
	}
	return func() error {
		c.AllowedOrigins, c.ToolsDisabled = origins, disabled
		for _, d := range durations {
			v, err := time.ParseDuration(d.raw)
			if err != nil || v <= 0 {
				return fmt.Errorf("SANDCHAT_%s: %q is not a positive duration (e.g. 30s, 24h)", d.name, d.raw)
			}
			*d.dst = v
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
