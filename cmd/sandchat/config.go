package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations/lifecycle"
	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/toolkits"
)

// Config is the whole process configuration. Every field is one entry of the settings
// table: a flag and a SANDCHAT_* environment variable; the flag wins, then the variable,
// then the default, and every default works on a developer machine.
type Config struct {
	Addr string
	// MetricsAddr, when set, is a listener of its own for /metrics and pprof; the
	// public address then serves neither.
	MetricsAddr     string
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
	// one in the file if it still authenticates, else a new admin's, written there; and
	// a login link for that admin.
	AdminTokenFile string
	// PublicURL is where browsers reach the server; login links start with it. Empty:
	// http:// and the listen address.
	PublicURL string
	// LoginLinkTTL is how long a login link works (once); SessionTTL how long the
	// browser session it starts lasts.
	LoginLinkTTL time.Duration
	SessionTTL   time.Duration
	// RateLogins bounds sign-in attempts per client address per minute; 0: unlimited.
	RateLogins int
	// TrustedProxies are the proxies in front of the server (IPs, CIDR ranges), whose
	// ProxyHeader names the client's address.
	TrustedProxies []string
	ProxyHeader    string
	// WSQueueBytes bounds what may wait to be written to one WebSocket (queued, or unsent
	// in the kernel); a client that falls further behind is disconnected and reconnects
	// with since.
	WSQueueBytes int
	// Per-user limits per minute; 0 disables one.
	RateMessages   int
	RateExecutions int
	// ConversationQuota bounds what one conversation stores: its uploads, its runs'
	// files and the Python state of all its sessions, together.
	ConversationQuota int64
	Sandbox           SandboxConfig
	LLM               LLMConfig
	// TurnStaleAfter: a running turn whose node has not renewed it for this long is
	// failed (its node crashed).
	TurnStaleAfter time.Duration
	// Retention deletes conversations no one used for this long, with all their data;
	// 0: off.
	Retention time.Duration
	// NoMigrate: serve applies no migrations (`sandchat migrate` does, once per upgrade)
	// and refuses a database behind this build.
	NoMigrate bool
}

// LLMConfig selects the model behind agents.
type LLMConfig struct {
	Provider   string // builtin or openai: what agents without a model of their own use
	BaseURL    string
	APIKey     string
	Model      string
	MaxRetries int
}

// setting is one entry of the configuration table (sandchat.Setting). The text of each
// (flag, else variable, else default) is kept as written until every flag is parsed, so
// a bad value is reported as written and under the variable's name. Serve marks those
// only serve reads (migrate, user and the sandbox commands do not).
type setting = sandchat.Setting[Config]

// settings is the configuration: every setting of every subcommand, in the order they
// are parsed and checked.
func settings() []setting { return slices.Concat(storeSettings, serveSettings, sandboxSettings) }

// storeSettings are read by every subcommand that talks to the stores.
var storeSettings = []setting{
	{Env: "DATABASE_URL", Def: "postgres://postgres@127.0.0.1:5432/sandchat?sslmode=disable", Help: "Postgres URL",
		Value: sandchat.Text(func(c *Config) *string { return &c.DatabaseURL }), Rule: func(c *Config) error {
			if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
				return fmt.Errorf("not a postgres:// URL")
			}
			return nil
		}},
	{Env: "REDIS_URL", Def: "redis://127.0.0.1:6379/0", Help: "Redis URL: one server, a Cluster (redis://seed1:port?addr=seed2:port&addr=…) or Sentinel (redis://sentinel:26379/0?master_name=NAME&addr=…)",
		Value: sandchat.Text(func(c *Config) *string { return &c.RedisURL }), Rule: func(c *Config) error {
			_, err := parseRedisURL(c.RedisURL)
			return err
		}},
	// Every key and channel lives under the prefix; an empty one would mix this
	// deployment's state with anything else in the Redis.
	{Env: "REDIS_PREFIX", Def: "sandchat:", Help: "prefix of every Redis key and channel, so deployments sharing a Redis stay apart",
		Value: sandchat.Text(func(c *Config) *string { return &c.RedisPrefix }), Rule: func(c *Config) error {
			if strings.TrimSpace(c.RedisPrefix) == "" {
				return fmt.Errorf("must not be empty (e.g. sandchat:)")
			}
			return nil
		}},
	// The user commands print login links too.
	{Env: "PUBLIC_URL", Help: "where browsers reach the server (https://chat.example.com), the start of login links; default http:// and the listen address",
		Value: sandchat.Text(func(c *Config) *string { return &c.PublicURL }), Rule: func(c *Config) error {
			if c.PublicURL == "" {
				return nil
			}
			if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
				return fmt.Errorf("%q is not a URL like https://chat.example.com (scheme and host, no path)", c.PublicURL)
			}
			return nil
		}},
	{Env: "LOGIN_LINK_TTL", Def: "15m", Help: "how long a login link works (it works once)",
		Value: sandchat.Duration(func(c *Config) *time.Duration { return &c.LoginLinkTTL }, time.Minute, 7*24*time.Hour)},
	{Env: "LOG_LEVEL", Def: "info", Help: "debug, info, warn or error",
		Value: sandchat.OneOf(func(c *Config) *string { return &c.LogLevel }, "debug", "info", "warn", "error")},
	{Env: "LOG_FORMAT", Def: "text", Help: "text or json",
		Value: sandchat.OneOf(func(c *Config) *string { return &c.LogFormat }, "text", "json")},
}

// serveSettings are read by serve only. Bounds: events must outlive a reconnect; a turn
// is renewed every second, so a stale limit of a few seconds is the least that does not
// fail live turns.
var serveSettings = []setting{
	{Env: "ADDR", Def: "127.0.0.1:8080", Help: "listen address", Serve: true,
		Value: sandchat.Text(func(c *Config) *string { return &c.Addr }), Rule: func(c *Config) error {
			if _, _, err := net.SplitHostPort(c.Addr); err != nil {
				return fmt.Errorf("%q is not host:port", c.Addr)
			}
			return nil
		}},
	{Env: "METRICS_ADDR", Help: "a listener of its own (host:port) for /metrics and Go's profiler (/debug/pprof/); the public address then serves neither; default: /metrics on the public address, no profiler", Serve: true,
		Value: sandchat.Text(func(c *Config) *string { return &c.MetricsAddr }), Rule: func(c *Config) error {
			if c.MetricsAddr == "" {
				return nil
			}
			if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
				return fmt.Errorf("%q is not host:port", c.MetricsAddr)
			}
			if c.MetricsAddr == c.Addr && !strings.HasSuffix(c.Addr, ":0") {
				return fmt.Errorf("%q is SANDCHAT_ADDR too: the metrics need an address of their own", c.MetricsAddr)
			}
			return nil
		}},
	{Env: "ALLOWED_ORIGINS", Help: "comma-separated browser origins allowed to open WebSockets and act with a browser session; default: the server's own and SANDCHAT_PUBLIC_URL's", Serve: true,
		Value: sandchat.List(func(c *Config) *[]string { return &c.AllowedOrigins }), Rule: func(c *Config) error {
			for _, o := range c.AllowedOrigins {
				if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
					return fmt.Errorf("%q is not an origin like https://chat.example.com", o)
				}
			}
			return nil
		}},
	{Env: "TOOLS_DISABLED", Help: "comma-separated internal tool ids switched off for the whole deployment", Serve: true,
		Value: sandchat.List(func(c *Config) *[]string { return &c.ToolsDisabled }), Rule: func(c *Config) error {
			known := toolkits.NewCatalogue(nil, nil)
			for _, id := range c.ToolsDisabled {
				if !known.Has(id) {
					return fmt.Errorf("%q is not an internal tool id (%s, %s)", id, toolkits.PyodideSandbox, toolkits.SwarmMode)
				}
			}
			return nil
		}},
	{Env: "WS_QUEUE_BYTES", Def: "4MiB", Help: "bytes that may wait to be written to one WebSocket before it is dropped as too slow", Serve: true,
		Value: sandchat.Bytes(func(c *Config) *int { return &c.WSQueueBytes }, 64<<10, 1<<30)},
	{Env: "RATE_MESSAGES", Def: "30", Help: "messages one user may send per minute; 0: unlimited", Serve: true,
		Value: sandchat.WholeNumber(func(c *Config) *int { return &c.RateMessages }, 0, 1_000_000)},
	{Env: "SESSION_TTL", Def: "720h", Help: "how long a browser stays signed in after opening a login link", Serve: true,
		Value: sandchat.Duration(func(c *Config) *time.Duration { return &c.SessionTTL }, 5*time.Minute, 365*24*time.Hour)},
	{Env: "RATE_LOGINS", Def: "10", Help: "sign-in attempts (login links exchanged) one client address may make per minute; 0: unlimited", Serve: true,
		Value: sandchat.WholeNumber(func(c *Config) *int { return &c.RateLogins }, 0, 1_000_000)},
	{Env: "TRUSTED_PROXIES", Help: "comma-separated addresses or CIDR ranges of the proxies in front of the server: the client's address is read from what they forward (SANDCHAT_PROXY_HEADER), and only from them; default none: the peer is the client", Serve: true,
		Value: sandchat.List(func(c *Config) *[]string { return &c.TrustedProxies }), Rule: func(c *Config) error {
			for _, p := range c.TrustedProxies {
				if _, err := netip.ParsePrefix(p); err != nil {
					if _, err := netip.ParseAddr(p); err != nil {
						return fmt.Errorf("%q is not an IP address or a CIDR range (10.0.0.0/8)", p)
					}
				}
			}
			return nil
		}},
	{Env: "PROXY_HEADER", Def: "X-Forwarded-For", Help: "the header in which the trusted proxies name the client's address: X-Forwarded-For (the proxies' chain, read from the right) or one a proxy sets alone, such as X-Real-IP", Serve: true,
		Value: sandchat.Text(func(c *Config) *string { return &c.ProxyHeader }), Rule: func(c *Config) error {
			if c.ProxyHeader == "" || strings.ContainsAny(c.ProxyHeader, " :\t\r\n") {
				return fmt.Errorf("%q is not a header name", c.ProxyHeader)
			}
			if strings.EqualFold(c.ProxyHeader, "Forwarded") {
				// Its entries are "for=…;proto=…", no address: every client would count
				// as the proxy, and one could keep all of them from signing in.
				return fmt.Errorf("the Forwarded header (RFC 7239) is not read; have the proxies send X-Forwarded-For, or X-Real-IP")
			}
			return nil
		}},
	{Env: "RATE_EXECUTIONS", Def: "120", Help: "sandbox runs one user may start per minute; 0: unlimited", Serve: true,
		Value: sandchat.WholeNumber(func(c *Config) *int { return &c.RateExecutions }, 0, 1_000_000)},
	{Env: "CONVERSATION_QUOTA", Def: "256MiB", Help: "what one conversation may store: uploads, files from runs and Python session state together", Serve: true,
		Value: sandchat.Bytes(func(c *Config) *int64 { return &c.ConversationQuota }, 1<<20, 1<<40)},
	{Env: "LLM_PROVIDER", Def: "builtin", Help: "builtin (offline) or openai: the model of agents that name none", Serve: true,
		Value: sandchat.Text(func(c *Config) *string { return &c.LLM.Provider }), Rule: func(c *Config) error {
			if c.LLM.Provider == "openai" && c.LLM.APIKey == "" {
				return fmt.Errorf("openai needs SANDCHAT_LLM_API_KEY")
			}
			return sandchat.IsOneOf(c.LLM.Provider, "builtin", "openai")
		}},
	{Env: "LLM_BASE_URL", Def: "https://api.openai.com/v1", Help: "OpenAI-compatible Chat Completions base URL", Serve: true,
		Value: sandchat.Text(func(c *Config) *string { return &c.LLM.BaseURL })},
	{Env: "LLM_API_KEY", Help: "API key of the OpenAI-compatible endpoint", Serve: true, EnvOnly: true,
		Value: sandchat.Text(func(c *Config) *string { return &c.LLM.APIKey })},
	{Env: "LLM_MODEL", Def: "gpt-4o-mini", Help: "default model for the openai provider", Serve: true,
		Value: sandchat.Text(func(c *Config) *string { return &c.LLM.Model })},
	{Env: "LLM_MAX_RETRIES", Def: "2", Help: "retries on 429/5xx", Serve: true,
		Value: sandchat.WholeNumber(func(c *Config) *int { return &c.LLM.MaxRetries }, 0, 10)},
	{Env: "ADMIN_TOKEN_FILE", Help: "print a working admin token at start, keeping it in this file", Serve: true,
		Value: sandchat.Text(func(c *Config) *string { return &c.AdminTokenFile })},
	{Env: "EVENT_RETENTION", Def: "24h", Help: "replay history kept per conversation", Serve: true,
		Value: sandchat.Duration(func(c *Config) *time.Duration { return &c.EventRetention }, time.Minute, 365*24*time.Hour)},
	{Env: "SHUTDOWN_TIMEOUT", Def: "15s", Help: "how long running turns and requests get to finish at shutdown", Serve: true,
		Value: sandchat.Duration(func(c *Config) *time.Duration { return &c.ShutdownTimeout }, time.Second, time.Hour)},
	{Env: "TURN_STALE_AFTER", Def: "30s", Help: "a running turn its node stopped renewing this long ago is failed", Serve: true,
		Value: sandchat.Duration(func(c *Config) *time.Duration { return &c.TurnStaleAfter }, 5*time.Second, 24*time.Hour)},
	{Env: "RETENTION", Def: "off", Help: "delete conversations no one used for this long (e.g. 2160h), with their messages, runs, files and Python state; off: keep them", Serve: true,
		Value: sandchat.DurationOrOff(func(c *Config) *time.Duration { return &c.Retention }, lifecycle.MinRetention, 100*365*24*time.Hour)},
	{Env: "NO_MIGRATE", Def: "false", Help: "apply no migrations at start (`sandchat migrate` does, once per upgrade) and refuse a database behind this build", Serve: true,
		Value: sandchat.Boolean(func(c *Config) *bool { return &c.NoMigrate })},
}

// bind registers the flags every subcommand that talks to the stores shares.
func (c *Config) bind(fs *flag.FlagSet) (finish func() error) { return c.bindSettings(fs, false) }

// bindServe registers the flags of serve.
func (c *Config) bindServe(fs *flag.FlagSet) (finish func() error) { return c.bindSettings(fs, true) }

// bindSettings registers a flag for each setting the subcommand reads, with the
// variable's text or the default as its value. finish, called after fs.Parse, parses and
// checks them all and stops at the first bad one.
func (c *Config) bindSettings(fs *flag.FlagSet, serve bool) (finish func() error) {
	type bound struct {
		setting
		raw *string
	}
	var all []bound
	for _, s := range settings() {
		if s.Serve && !serve {
			continue
		}
		raw := new(string)
		*raw = s.Def
		if v, ok := os.LookupEnv("SANDCHAT_" + s.Env); ok {
			*raw = v
		}
		all = append(all, bound{s, raw})
		switch {
		case s.EnvOnly:
		case s.Kind == sandchat.KindBoolean:
			fs.Var((*boolText)(raw), s.FlagName(), s.Usage())
		case s.Kind == sandchat.KindList:
			fs.Var((*listText)(raw), s.FlagName(), s.Usage())
		default:
			fs.StringVar(raw, s.FlagName(), *raw, s.Usage())
		}
	}
	return func() error {
		// Fields no setting names keep the engine's defaults.
		c.Sandbox.Engine = sandbox.DefaultConfig()
		for _, b := range all {
			if err := b.Parse(c, *b.raw); err != nil {
				return err
			}
		}
		c.Sandbox.Engine.RedisPrefix = c.RedisPrefix
		c.Sandbox.Engine.PipOff = c.Sandbox.Pip == "off"
		for _, b := range all {
			if err := b.Check(c); err != nil {
				return err
			}
		}
		return nil
	}
}

// boolText is a boolean flag kept as text, so a bad value is reported like any other.
type boolText string

func (b *boolText) String() string {
	if v, err := strconv.ParseBool(string(*b)); err == nil && v {
		return "true"
	}
	return "false"
}
func (b *boolText) Set(v string) error { *b = boolText(v); return nil }
func (b *boolText) IsBoolFlag() bool   { return true }

// listText is a comma-separated flag kept as text.
type listText string

func (l *listText) String() string     { return string(*l) }
func (l *listText) Set(v string) error { *l = listText(v); return nil }

// list is a comma-separated flag value of a subcommand's own (exec --data).
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
