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

	"github.com/sandchat/sandchat/conversations/lifecycle"
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

// setting is one entry of the configuration table. Its variable is SANDCHAT_<env>, its
// flag the same name in lower case with dashes unless flag says otherwise. The text of
// the setting (flag, else variable, else def) is kept as written until every flag is
// parsed, so a bad value is reported as written and under the variable's name.
type setting struct {
	env  string
	flag string
	def  string
	help string
	into parser
	// check refuses a parsed value the process cannot honour; its message follows
	// "SANDCHAT_<env>: ".
	check func(c *Config) error
	// serve: only serve reads it; migrate, user and the sandbox commands do not.
	serve bool
	// envOnly: a secret, read from the environment only because flags show in ps.
	envOnly bool
}

func (s setting) flagName() string {
	if s.flag != "" {
		return s.flag
	}
	return strings.ReplaceAll(strings.ToLower(s.env), "_", "-")
}

// usage is the setting's --help line.
func (s setting) usage() string {
	return fmt.Sprintf("%s%s (SANDCHAT_%s)", s.help, s.into.helpSuffix, s.env)
}

// settings is the configuration: every setting of every subcommand, in the order they
// are parsed and checked.
func settings() []setting { return slices.Concat(storeSettings, serveSettings, sandboxSettings) }

// storeSettings are read by every subcommand that talks to the stores.
var storeSettings = []setting{
	{env: "DATABASE_URL", def: "postgres://postgres@127.0.0.1:5432/sandchat?sslmode=disable", help: "Postgres URL",
		into: text(func(c *Config) *string { return &c.DatabaseURL }), check: func(c *Config) error {
			if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
				return fmt.Errorf("not a postgres:// URL")
			}
			return nil
		}},
	{env: "REDIS_URL", def: "redis://127.0.0.1:6379/0", help: "Redis URL: one server, a Cluster (redis://seed1:port?addr=seed2:port&addr=…) or Sentinel (redis://sentinel:26379/0?master_name=NAME&addr=…)",
		into: text(func(c *Config) *string { return &c.RedisURL }), check: func(c *Config) error {
			_, err := parseRedisURL(c.RedisURL)
			return err
		}},
	// Every key and channel lives under the prefix; an empty one would mix this
	// deployment's state with anything else in the Redis.
	{env: "REDIS_PREFIX", def: "sandchat:", help: "prefix of every Redis key and channel, so deployments sharing a Redis stay apart",
		into: text(func(c *Config) *string { return &c.RedisPrefix }), check: func(c *Config) error {
			if strings.TrimSpace(c.RedisPrefix) == "" {
				return fmt.Errorf("must not be empty (e.g. sandchat:)")
			}
			return nil
		}},
	// The user commands print login links too.
	{env: "PUBLIC_URL", help: "where browsers reach the server (https://chat.example.com), the start of login links; default http:// and the listen address",
		into: text(func(c *Config) *string { return &c.PublicURL }), check: func(c *Config) error {
			if c.PublicURL == "" {
				return nil
			}
			if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
				return fmt.Errorf("%q is not a URL like https://chat.example.com (scheme and host, no path)", c.PublicURL)
			}
			return nil
		}},
	{env: "LOGIN_LINK_TTL", def: "15m", help: "how long a login link works (it works once)",
		into: durationIn(time.Minute, 7*24*time.Hour, func(c *Config) *time.Duration { return &c.LoginLinkTTL })},
	{env: "LOG_LEVEL", def: "info", help: "debug, info, warn or error",
		into: text(func(c *Config) *string { return &c.LogLevel }), check: func(c *Config) error {
			return oneOf(c.LogLevel, "debug", "info", "warn", "error")
		}},
	{env: "LOG_FORMAT", def: "text", help: "text or json",
		into: text(func(c *Config) *string { return &c.LogFormat }), check: func(c *Config) error {
			return oneOf(c.LogFormat, "text", "json")
		}},
}

// serveSettings are read by serve only. Bounds: events must outlive a reconnect; a turn
// is renewed every second, so a stale limit of a few seconds is the least that does not
// fail live turns.
var serveSettings = []setting{
	{env: "ADDR", def: "127.0.0.1:8080", help: "listen address", serve: true,
		into: text(func(c *Config) *string { return &c.Addr }), check: func(c *Config) error {
			if _, _, err := net.SplitHostPort(c.Addr); err != nil {
				return fmt.Errorf("%q is not host:port", c.Addr)
			}
			return nil
		}},
	{env: "METRICS_ADDR", help: "a listener of its own (host:port) for /metrics and Go's profiler (/debug/pprof/); the public address then serves neither; default: /metrics on the public address, no profiler", serve: true,
		into: text(func(c *Config) *string { return &c.MetricsAddr }), check: func(c *Config) error {
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
	{env: "ALLOWED_ORIGINS", help: "comma-separated browser origins allowed to open WebSockets and act with a browser session; default: the server's own and SANDCHAT_PUBLIC_URL's", serve: true,
		into: commaList(func(c *Config) *[]string { return &c.AllowedOrigins }), check: func(c *Config) error {
			for _, o := range c.AllowedOrigins {
				if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
					return fmt.Errorf("%q is not an origin like https://chat.example.com", o)
				}
			}
			return nil
		}},
	{env: "TOOLS_DISABLED", help: "comma-separated internal tool ids switched off for the whole deployment", serve: true,
		into: commaList(func(c *Config) *[]string { return &c.ToolsDisabled }), check: func(c *Config) error {
			known := toolkits.NewCatalogue(nil, nil)
			for _, id := range c.ToolsDisabled {
				if !known.Has(id) {
					return fmt.Errorf("%q is not an internal tool id (%s, %s)", id, toolkits.PyodideSandbox, toolkits.SwarmMode)
				}
			}
			return nil
		}},
	{env: "WS_QUEUE_BYTES", def: strconv.Itoa(4 << 20), help: "bytes that may wait to be written to one WebSocket before it is dropped as too slow", serve: true,
		into: wholeNumber(func(c *Config) *int { return &c.WSQueueBytes }), check: func(c *Config) error {
			if c.WSQueueBytes < 64<<10 {
				return fmt.Errorf("%d is below the 64 KiB minimum", c.WSQueueBytes)
			}
			return nil
		}},
	{env: "RATE_MESSAGES", def: "30", help: "messages one user may send per minute; 0: unlimited", serve: true,
		into: wholeNumber(func(c *Config) *int { return &c.RateMessages }), check: func(c *Config) error { return unlimitedOrPositive(c.RateMessages) }},
	{env: "SESSION_TTL", def: "720h", help: "how long a browser stays signed in after opening a login link", serve: true,
		into: durationIn(5*time.Minute, 365*24*time.Hour, func(c *Config) *time.Duration { return &c.SessionTTL })},
	{env: "RATE_LOGINS", def: "10", help: "sign-in attempts (login links exchanged) one client address may make per minute; 0: unlimited", serve: true,
		into: wholeNumber(func(c *Config) *int { return &c.RateLogins }), check: func(c *Config) error { return unlimitedOrPositive(c.RateLogins) }},
	{env: "TRUSTED_PROXIES", help: "comma-separated addresses or CIDR ranges of the proxies in front of the server: the client's address is read from what they forward (SANDCHAT_PROXY_HEADER), and only from them; default none: the peer is the client", serve: true,
		into: commaList(func(c *Config) *[]string { return &c.TrustedProxies }), check: func(c *Config) error {
			for _, p := range c.TrustedProxies {
				if _, err := netip.ParsePrefix(p); err != nil {
					if _, err := netip.ParseAddr(p); err != nil {
						return fmt.Errorf("%q is not an IP address or a CIDR range (10.0.0.0/8)", p)
					}
				}
			}
			return nil
		}},
	{env: "PROXY_HEADER", def: "X-Forwarded-For", help: "the header in which the trusted proxies name the client's address: X-Forwarded-For (the proxies' chain, read from the right) or one a proxy sets alone, such as X-Real-IP", serve: true,
		into: text(func(c *Config) *string { return &c.ProxyHeader }), check: func(c *Config) error {
			if c.ProxyHeader == "" || strings.ContainsAny(c.ProxyHeader, " :\t\r\n") {
				return fmt.Errorf("%q is not a header name", c.ProxyHeader)
			}
			return nil
		}},
	{env: "RATE_EXECUTIONS", def: "120", help: "sandbox runs one user may start per minute; 0: unlimited", serve: true,
		into: wholeNumber(func(c *Config) *int { return &c.RateExecutions }), check: func(c *Config) error { return unlimitedOrPositive(c.RateExecutions) }},
	{env: "CONVERSATION_QUOTA", def: "256MiB", help: "what one conversation may store: uploads, files from runs and Python session state together", serve: true,
		into: size(func(c *Config) *int64 { return &c.ConversationQuota }), check: func(c *Config) error {
			if c.ConversationQuota < 1<<20 || c.ConversationQuota > 1<<40 {
				return fmt.Errorf("%d bytes is not between 1 MiB and 1 TiB", c.ConversationQuota)
			}
			return nil
		}},
	{env: "LLM_PROVIDER", def: "builtin", help: "builtin (offline) or openai: the model of agents that name none", serve: true,
		into: text(func(c *Config) *string { return &c.LLM.Provider }), check: func(c *Config) error {
			if c.LLM.Provider == "openai" && c.LLM.APIKey == "" {
				return fmt.Errorf("openai needs SANDCHAT_LLM_API_KEY")
			}
			return oneOf(c.LLM.Provider, "builtin", "openai")
		}},
	{env: "LLM_BASE_URL", def: "https://api.openai.com/v1", help: "OpenAI-compatible Chat Completions base URL", serve: true,
		into: text(func(c *Config) *string { return &c.LLM.BaseURL })},
	{env: "LLM_API_KEY", help: "API key of the OpenAI-compatible endpoint", serve: true, envOnly: true,
		into: text(func(c *Config) *string { return &c.LLM.APIKey })},
	{env: "LLM_MODEL", def: "gpt-4o-mini", help: "default model for the openai provider", serve: true,
		into: text(func(c *Config) *string { return &c.LLM.Model })},
	{env: "LLM_MAX_RETRIES", def: "2", help: "retries on 429/5xx", serve: true,
		into: wholeNumber(func(c *Config) *int { return &c.LLM.MaxRetries }), check: func(c *Config) error {
			if c.LLM.MaxRetries < 0 || c.LLM.MaxRetries > 10 {
				return fmt.Errorf("%d is not between 0 and 10", c.LLM.MaxRetries)
			}
			return nil
		}},
	{env: "ADMIN_TOKEN_FILE", help: "print a working admin token at start, keeping it in this file", serve: true,
		into: text(func(c *Config) *string { return &c.AdminTokenFile })},
	{env: "EVENT_RETENTION", def: "24h", help: "replay history kept per conversation", serve: true,
		into: durationIn(time.Minute, 365*24*time.Hour, func(c *Config) *time.Duration { return &c.EventRetention })},
	{env: "SHUTDOWN_TIMEOUT", def: "15s", help: "how long running turns and requests get to finish at shutdown", serve: true,
		into: durationIn(time.Second, time.Hour, func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
	{env: "TURN_STALE_AFTER", def: "30s", help: "a running turn its node stopped renewing this long ago is failed", serve: true,
		into: durationIn(5*time.Second, 24*time.Hour, func(c *Config) *time.Duration { return &c.TurnStaleAfter })},
	{env: "RETENTION", def: "off", help: "delete conversations no one used for this long (e.g. 2160h), with their messages, runs, files and Python state; off: keep them", serve: true,
		into: durationOrOff(lifecycle.MinRetention, 100*365*24*time.Hour, func(c *Config) *time.Duration { return &c.Retention })},
	{env: "NO_MIGRATE", def: "false", help: "apply no migrations at start (`sandchat migrate` does, once per upgrade) and refuse a database behind this build", serve: true,
		into: boolean(func(c *Config) *bool { return &c.NoMigrate })},
}

// bind registers the flags every subcommand that talks to the stores shares.
func (c *Config) bind(fs *flag.FlagSet) (finish func() error) { return c.bindSettings(fs, false) }

// bindServe registers the flags of serve.
func (c *Config) bindServe(fs *flag.FlagSet) (finish func() error) { return c.bindSettings(fs, true) }

// bindSettings registers a flag for each setting the subcommand reads, with the
// variable's text or the default as its value. finish, called after fs.Parse, parses and
// checks them all and stops at the first bad one.
func (c *Config) bindSettings(fs *flag.FlagSet, serve bool) (finish func() error) {
	c.Sandbox.Engine = defaultEngine()
	type bound struct {
		setting
		raw *string
	}
	var all []bound
	for _, s := range settings() {
		if s.serve && !serve {
			continue
		}
		raw := new(string)
		*raw = s.def
		if v, ok := os.LookupEnv("SANDCHAT_" + s.env); ok {
			*raw = v
		}
		all = append(all, bound{s, raw})
		switch {
		case s.envOnly:
		case s.into.kind == kindBoolean:
			fs.Var((*boolText)(raw), s.flagName(), s.usage())
		case s.into.kind == kindList:
			fs.Var((*listText)(raw), s.flagName(), s.usage())
		default:
			fs.StringVar(raw, s.flagName(), *raw, s.usage())
		}
	}
	return func() error {
		for _, b := range all {
			if err := b.into.set(c, *b.raw); err != nil {
				return fmt.Errorf("SANDCHAT_%s: %w", b.env, err)
			}
		}
		for _, b := range all {
			if b.check == nil {
				continue
			}
			if err := b.check(c); err != nil {
				return fmt.Errorf("SANDCHAT_%s: %w", b.env, err)
			}
		}
		return c.Sandbox.finish(c.RedisPrefix)
	}
}

// parser turns a setting's text into its field of Config.
type parser struct {
	kind       kind
	set        func(c *Config, raw string) error
	helpSuffix string // what --help adds about the form of the value
}

// kind is the form of a setting's text.
type kind string

const (
	kindText        kind = "text"
	kindBoolean     kind = "boolean" // its flag may be given without a value
	kindWholeNumber kind = "whole number"
	kindSize        kind = "size"
	kindDuration    kind = "duration"
	kindList        kind = "list"
)

func text(field func(*Config) *string) parser {
	return parser{kind: kindText, set: func(c *Config, raw string) error { *field(c) = raw; return nil }}
}

func boolean(field func(*Config) *bool) parser {
	return parser{kind: kindBoolean, set: func(c *Config, raw string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not true or false", raw)
		}
		*field(c) = b
		return nil
	}}
}

func wholeNumber(field func(*Config) *int) parser {
	return parser{kind: kindWholeNumber, set: func(c *Config, raw string) error {
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not a whole number", raw)
		}
		*field(c) = n
		return nil
	}}
}

// size reads bytes with an optional KiB, MiB or GiB suffix.
func size[T int | int64](field func(*Config) *T) parser {
	return parser{kind: kindSize, helpSuffix: ", bytes or 512MiB", set: func(c *Config, raw string) error {
		n, err := parseSize(raw)
		if err != nil {
			return err
		}
		*field(c) = T(n)
		return nil
	}}
}

// duration reads Go's form (30s, 24h).
func duration(field func(*Config) *time.Duration) parser {
	return parser{kind: kindDuration, set: func(c *Config, raw string) error {
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 30s)", raw)
		}
		*field(c) = d
		return nil
	}}
}

// durationIn reads a positive duration between min and max.
func durationIn(min, max time.Duration, field func(*Config) *time.Duration) parser {
	return parser{kind: kindDuration, helpSuffix: fmt.Sprintf(", %s to %s", min, max), set: func(c *Config, raw string) error {
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a positive duration (e.g. 30s, 24h)", raw)
		}
		if d < min || d > max {
			return fmt.Errorf("%s is out of range (%s to %s)", d, min, max)
		}
		*field(c) = d
		return nil
	}}
}

// durationOrOff reads "off" (0) or a duration between min and max.
func durationOrOff(min, max time.Duration, field func(*Config) *time.Duration) parser {
	p := durationIn(min, max, field)
	p.helpSuffix = fmt.Sprintf(", off or %s to %s", min, max)
	set := p.set
	p.set = func(c *Config, raw string) error {
		if strings.TrimSpace(raw) == "off" {
			*field(c) = 0
			return nil
		}
		return set(c, raw)
	}
	return p
}

// commaList reads comma-separated values, dropping blanks.
func commaList(field func(*Config) *[]string) parser {
	return parser{kind: kindList, set: func(c *Config, raw string) error {
		var l []string
		for _, s := range strings.Split(raw, ",") {
			if s = strings.TrimSpace(s); s != "" {
				l = append(l, s)
			}
		}
		*field(c) = l
		return nil
	}}
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

func oneOf(v string, allowed ...string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	last := len(allowed) - 1
	return fmt.Errorf("%q is not %s or %s", v, strings.Join(allowed[:last], ", "), allowed[last])
}

func unlimitedOrPositive(n int) error {
	if n < 0 {
		return fmt.Errorf("%d must be 0 (unlimited) or positive", n)
	}
	return nil
}

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
