// Command sandchat is the sandchat server and its operator tools.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/agents"
	"github.com/sandchat/sandchat/agents/openai"
	agentstore "github.com/sandchat/sandchat/agents/pgstore"
	"github.com/sandchat/sandchat/conversations/lifecycle"
	convstore "github.com/sandchat/sandchat/conversations/pgstore"
	"github.com/sandchat/sandchat/conversations/redisbus"
	frontendapi "github.com/sandchat/sandchat/frontend-api"
	"github.com/sandchat/sandchat/migrations"
	"github.com/sandchat/sandchat/migrations/pgdb"
	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/sandbox/pgcold"
	"github.com/sandchat/sandchat/sandbox/prommetrics"
	"github.com/sandchat/sandchat/sandbox/redisstore"
	"github.com/sandchat/sandchat/toolkits"
)

const usage = `sandchat — the backend of a chat product whose assistant runs Python.

Usage:
  sandchat [serve] [flags]            run the server (the default; --no-migrate: leave migrations
                                      to sandchat migrate)
  sandchat migrate [flags]            apply database migrations and exit
  sandchat user create --name N [--admin]
                                      create a user; prints its API token, alone, on stdout,
                                      and a one-time login link for a browser on stderr
  sandchat user login-link (--name N | --id ID)
                                      print a new one-time login link for a user
  sandchat user|token|session|audit …  administration: users listed, disabled, deleted, erased,
                                      exported; tokens and browser sessions listed and revoked;
                                      the audit of it all (sandchat user --help lists them)
  sandchat doctor                     check the Python sandbox (Deno, Pyodide, Redis, a real run)
  sandchat exec [--session K] [code]  run Python through the sandbox engine (code or stdin)
  sandchat bench [-n N]               measure the sandbox engine (see docs/sandbox.md)
  sandchat --version                  this build's version and the pinned Deno and Pyodide

Every command takes --help. Flags mirror SANDCHAT_* environment variables.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "sandchat:", err)
			os.Exit(1)
		}
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && isHelp(args[0]) {
		cmd = "help"
	} else if len(args) > 0 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		cmd = "version"
	} else if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return runServe(ctx, args, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, args, stdout, stderr)
	case "user":
		switch {
		case len(args) > 0 && args[0] == "create":
			return runUserCreate(ctx, args[1:], stdout, stderr)
		case len(args) > 0 && args[0] == "login-link":
			return runLoginLink(ctx, args[1:], stdout, stderr)
		}
		if ok, err := runAdmin(ctx, cmd, args, stdout, stderr); ok {
			return err
		}
		help := "Usage: sandchat user create --name N [--admin]\n       sandchat user login-link (--name N | --id ID)\n\n" + adminUsage
		if len(args) > 0 && isHelp(args[0]) {
			fmt.Fprint(stdout, help)
			return nil
		}
		fmt.Fprint(stderr, help)
		return errors.New("unknown user subcommand")
	case "token", "session", "audit":
		if ok, err := runAdmin(ctx, cmd, args, stdout, stderr); ok {
			return err
		}
		if len(args) > 0 && isHelp(args[0]) {
			fmt.Fprint(stdout, adminUsage)
			return nil
		}
		fmt.Fprint(stderr, adminUsage)
		return fmt.Errorf("unknown %s subcommand", cmd)
	case "doctor":
		return runDoctor(ctx, args, stdout, stderr)
	case "exec":
		return runExec(ctx, args, os.Stdin, stdout, stderr)
	case "bench":
		return runBench(ctx, args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version":
		fmt.Fprintln(stdout, versionText())
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func newFlagSet(name, help string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sandchat %s\n\n%s\n\nFlags:\n", name, help)
		fs.PrintDefaults()
	}
	return fs
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg Config
	fs := newFlagSet("serve [flags]", "Runs the HTTP and WebSocket server, after applying migrations.", stderr)
	finish := cfg.bindServe(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := finish(); err != nil {
		return err
	}
	m := NewMain(cfg, newLogger(cfg, stderr))
	// The exporter's failures (a collector away) are the SDK's to report: in our log,
	// instead of in its own format on stderr.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { m.Log.Warn("opentelemetry", "err", err) }))
	if err := m.Run(ctx); err != nil {
		m.Close()
		return err
	}
	if cfg.AdminTokenFile != "" {
		if err := m.printSignIn(ctx, cfg.AdminTokenFile, stdout); err != nil {
			m.Close()
			return err
		}
	}
	<-ctx.Done()
	return m.Close()
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg Config
	fs := newFlagSet("migrate [flags]", "Applies pending database migrations (safe to run twice or from several nodes at once).", stderr)
	finish := cfg.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := finish(); err != nil {
		return err
	}
	if err := migrations.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	from, to, err := migrations.Migrate(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database at version %d (was %d)\n", to, from)
	return nil
}

func runUserCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg Config
	fs := newFlagSet("user create --name N [--admin]", "Creates a user and prints its API token, alone, on stdout (shown once), and on stderr a one-time login link\n"+
		"that signs the user in from a browser (SANDCHAT_PUBLIC_URL is where it points).", stderr)
	finish := cfg.bind(fs)
	name := fs.String("name", "", "the user's name (required)")
	admin := fs.Bool("admin", false, "make the user an admin (can create users)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := finish(); err != nil {
		return err
	}
	if strings.TrimSpace(*name) == "" {
		fs.Usage()
		return errors.New("--name is required")
	}
	db, err := openDB(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	users := agentstore.NewUsers(db)
	ctx = sandchat.WithCLI(ctx, osUser()) // recorded in the audit as the command line's
	u, token, err := users.CreateUser(ctx, *name, *admin)
	if err != nil {
		return errors.New(sandchat.ErrorMessage(err))
	}
	fmt.Fprintln(stdout, token)
	link, expires, err := loginLink(ctx, users, u.ID, cfg.LoginLinkTTL, linkBase(cfg.PublicURL, cfg.Addr))
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "Sign %s in from a browser: open %s\n  (one use, until %s; `sandchat user login-link %s` makes another)\n",
		u.Name, link, expires.Local().Format("15:04 MST"), userFlag(ctx, users, u))
	return nil
}

func runLoginLink(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg Config
	fs := newFlagSet("user login-link (--name N | --id ID)", "Prints, alone on stdout, a new one-time login link that signs the user in from a browser\n"+
		"(SANDCHAT_PUBLIC_URL is where it points; SANDCHAT_LOGIN_LINK_TTL how long it works).", stderr)
	finish := cfg.bind(fs)
	name := fs.String("name", "", "the user's name")
	id := fs.Int64("id", 0, "the user's id (when several users share a name)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := finish(); err != nil {
		return err
	}
	if (strings.TrimSpace(*name) == "") == (*id == 0) {
		fs.Usage()
		return errors.New("give --name or --id")
	}
	db, err := openDB(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	users := agentstore.NewUsers(db)
	ctx = sandchat.WithCLI(ctx, osUser())
	if *id == 0 {
		found, err := users.FindUsersByName(ctx, strings.TrimSpace(*name))
		if err != nil {
			return errors.New(sandchat.ErrorMessage(err))
		}
		switch len(found) {
		case 0:
			return fmt.Errorf("no user is named %q (`sandchat user create --name %s` makes one)", *name, *name)
		case 1:
			*id = found[0].ID
		default:
			ids := make([]string, len(found))
			for i, u := range found {
				ids[i] = fmt.Sprint(u.ID)
			}
			return fmt.Errorf("%d users are named %q (ids %s): say which with --id", len(found), *name, strings.Join(ids, ", "))
		}
	}
	link, expires, err := loginLink(ctx, users, *id, cfg.LoginLinkTTL, linkBase(cfg.PublicURL, cfg.Addr))
	if err != nil {
		return errors.New(sandchat.ErrorMessage(err))
	}
	fmt.Fprintln(stdout, link)
	fmt.Fprintf(stderr, "(one use, until %s)\n", expires.Local().Format("15:04 MST"))
	return nil
}

// userFlag names u for `sandchat user login-link`: by name, or by id when the name is
// not the user's alone.
func userFlag(ctx context.Context, users *agentstore.Users, u *sandchat.User) string {
	if same, err := users.FindUsersByName(ctx, u.Name); err == nil && len(same) == 1 && !strings.ContainsAny(u.Name, " '\"$`\\") {
		return "--name " + u.Name
	}
	return fmt.Sprintf("--id %d", u.ID)
}

// loginLink makes a one-time login link for the user, pointing at base.
func loginLink(ctx context.Context, sessions sandchat.SessionService, userID int64, ttl time.Duration, base string) (string, time.Time, error) {
	if ttl == 0 {
		ttl = frontendapi.DefaultLoginLinkTTL
	}
	secret, expires, err := sessions.CreateLoginLink(ctx, userID, ttl)
	if err != nil {
		return "", time.Time{}, err
	}
	return frontendapi.LoginURL(base, secret), expires, nil
}

// linkBase is where a browser reaches the server: the public URL when set, else the
// listen address (the one in SANDCHAT_ADDR for the commands that do not listen), with
// a wildcard host read as this machine.
func linkBase(publicURL, addr string) string {
	if publicURL != "" {
		return publicURL
	}
	if addr == "" {
		addr = os.Getenv("SANDCHAT_ADDR")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = "127.0.0.1", "8080"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(contextHandler{slog.NewJSONHandler(w, opts)})
	}
	return slog.New(contextHandler{slog.NewTextHandler(w, opts)})
}

// openDB creates the database if needed, migrates it and opens a pool.
func openDB(ctx context.Context, url string) (*pgxpool.Pool, error) {
	if err := prepareDB(ctx, url); err != nil {
		return nil, err
	}
	return pgxpool.New(ctx, url)
}

// checkMigrated refuses a database another process migrates (`sandchat migrate`, once
// per upgrade) that is behind this build, since its queries need the newer schema; one
// ahead, migrated by a newer build during a rolling upgrade, is used, since each
// migration leaves the schema usable by the release before it.
func checkMigrated(ctx context.Context, url string) error {
	v, err := migrations.Current(ctx, url)
	if err != nil {
		return fmt.Errorf("postgres: %w (is it running? `make services` starts it)", err)
	}
	if want := migrations.Latest(); v < want {
		return fmt.Errorf("the database is at version %d and this build needs %d: run `sandchat migrate` first (it is started with --no-migrate)", v, want)
	}
	return nil
}

// prepareDB creates the database if needed and migrates it.
func prepareDB(ctx context.Context, url string) error {
	if err := migrations.EnsureDatabase(ctx, url); err != nil {
		return fmt.Errorf("postgres: %w (is it running? `make services` starts it)", err)
	}
	_, _, err := migrations.Migrate(ctx, url)
	return err
}

// openPool opens a pool whose statements tracer sees (nil: none).
func openPool(ctx context.Context, url string, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Tracer = tracer
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Main is the wired server: main builds it from Config, tests too.
type Main struct {
	Config Config
	Log    *slog.Logger

	DB      *pgxpool.Pool
	Redis   redis.UniversalClient
	Users   *agentstore.Users
	Store   *convstore.Store
	HTTP    *frontendapi.Server
	Hub     *frontendapi.Hub
	Engine  *sandbox.Engine
	Limiter *redisbus.Limiter
	Runner  *agents.Runner
	// Metrics is the process's registry: every part's collectors (metrics.go).
	Metrics *prometheus.Registry
	openai  *openai.Provider
	sandbox *toolkits.Sandbox
	tables  *toolkits.Tables // the data analysis tool's reads, shared with the preview endpoint
	// Probes, when set before Run, replace the availability checks of the catalogue's
	// tools (tests that are about toggles, not engines, use it).
	Probes map[string]toolkits.Probe
	// SandboxEngine, when set before Run, is the engine behind the sandbox tool instead
	// of sandbox.Engine (fault tests script the engine's side of the contract).
	SandboxEngine toolkits.Engine
	// Tracing, when set before Run, is where spans go; else OpenTelemetry's standard
	// variables decide (tracing.go): none unless OTEL_EXPORTER_OTLP_ENDPOINT is set.
	Tracing     trace.TracerProvider
	stopTracing func(context.Context) error // flushes the spans of the provider Run made

	// Admin is what administrators do (the admin API; the command line builds its own).
	Admin *lifecycle.Service
	// Retention deletes conversations idle past SANDCHAT_RETENTION; nil when it is off.
	Retention *lifecycle.Retention
	// RetentionMin, when set before Run, lowers retention's minimum (tests).
	RetentionMin time.Duration
	// CredentialCheck, when set before Run, is how often each socket checks that its
	// token or session still works, instead of every minute (tests).
	CredentialCheck time.Duration

	// quotaLocks is the pool the conversations' quota locks are held on, apart from DB
	// (conversations/pgstore's quota.go says why).
	quotaLocks *pgxpool.Pool
	node       string // this process among the nodes: its turns' owner, its pub/sub messages' sender
	ln         net.Listener
	metricsLn  *metricsServer // SANDCHAT_METRICS_ADDR's listener, when set
	// engineMetrics is what the engine tells of its runs, as Prometheus metrics.
	engineMetrics *prommetrics.Observer
	collectors    []prometheus.Collector // every one in Metrics
	served        chan error
	cancel        context.CancelFunc
	closeOnce     sync.Once
	closeErr      error
}

// NewMain returns an unstarted server.
func NewMain(cfg Config, log *slog.Logger) *Main { return &Main{Config: cfg, Log: log} }

// Run opens the stores, starts the sandbox engine, builds the services and starts
// serving in the background. Close undoes whatever part of it was done.
func (m *Main) Run(ctx context.Context) error {
	if m.Tracing == nil {
		tp, stop, err := newTracing(ctx)
		if err != nil {
			return err
		}
		m.Tracing, m.stopTracing = tp, stop
	}
	if err := m.openStores(ctx); err != nil {
		return err
	}
	bg, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	catalogue, err := m.startEngine(bg)
	if err != nil {
		return err
	}
	if err := m.buildServices(bg, catalogue); err != nil {
		return err
	}
	return m.serve(bg)
}

// openStores creates and migrates the database if needed and connects to Postgres and
// Redis, failing with a hint when either is not running.
func (m *Main) openStores(ctx context.Context) (err error) {
	prepare := prepareDB
	if m.Config.NoMigrate {
		prepare = checkMigrated
	}
	if err := prepare(ctx, m.Config.DatabaseURL); err != nil {
		return err
	}
	var statements pgx.QueryTracer // a span for each statement, when spans go anywhere
	if m.traced() {
		statements = pgTracer{m.tracer("postgres")}
	}
	if m.DB, err = openPool(ctx, m.Config.DatabaseURL, statements); err != nil {
		return err
	}
	if m.quotaLocks, err = openPool(ctx, m.Config.DatabaseURL, statements); err != nil {
		return err
	}
	rdb, target, err := openRedis(ctx, m.Config.RedisURL)
	if err != nil {
		return err
	}
	m.Redis = rdb
	if m.traced() {
		// Commands without their arguments: keys and values hold users' data.
		if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(m.Tracing), redisotel.WithDBStatement(false)); err != nil {
			return fmt.Errorf("trace redis: %w", err)
		}
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w (is it running? `make services` starts it)", target.addrs(), err)
	}
	return nil
}

// startEngine starts the sandbox engine in the background (booting Deno and Pyodide
// takes seconds: the server answers meanwhile, with the sandbox reported as starting)
// and returns the tool catalogue with each tool's availability probe.
func (m *Main) startEngine(bg context.Context) (*toolkits.Catalogue, error) {
	cfg := m.Config
	probes := m.Probes
	if probes == nil {
		probes = map[string]toolkits.Probe{toolkits.PyodideSandbox: func() (bool, string) {
			return false, "The Python sandbox is switched off in this deployment (SANDCHAT_SANDBOX_ENABLED=false)."
		}}
	}
	// The conversations' store: also the record of runs that rebuilds a session Redis lost.
	m.Store = convstore.New(m.DB, cfg.EventRetention, convstore.Options{QuotaLocks: m.quotaLocks})
	if cfg.Sandbox.Enabled {
		cold := pgcold.New(pgdb.NewPool(m.DB), cfg.Sandbox.Engine.RedisPrefix, cfg.Sandbox.Engine.SessionTTL)
		st, err := engineStore(m.Redis, cfg.Sandbox.Engine, redisstore.Options{Cold: cold, HotBytes: cfg.Sandbox.Engine.HotStateBytes})
		if err != nil {
			return nil, err
		}
		m.engineMetrics = prommetrics.NewObserver()
		if m.Engine, err = sandbox.New(cfg.Sandbox.Engine, st, m.Log.With("component", "sandbox"), sandbox.WithHistory(m.Store),
			sandbox.WithObserver(m.engineMetrics), sandbox.WithTracer(m.tracer("sandbox"))); err != nil {
			return nil, err
		}
		if m.Probes == nil {
			probes[toolkits.PyodideSandbox] = m.Engine.Available
		}
		go func() {
			if err := m.Engine.Start(bg); err != nil && bg.Err() == nil {
				m.Log.Error("sandbox start", "err", err)
			}
		}()
	}
	if _, ok := probes[toolkits.SwarmMode]; !ok {
		probes[toolkits.SwarmMode] = func() (bool, string) { return true, "" }
	}
	if _, ok := probes[toolkits.DataAnalysis]; !ok {
		probes[toolkits.DataAnalysis] = func() (bool, string) { return true, "" } // pure Go: nothing to start
	}
	catalogue := toolkits.NewCatalogue(probes, cfg.ToolsDisabled)
	if cfg.Sandbox.Default == "on" {
		if err := catalogue.DefaultOn(toolkits.PyodideSandbox); err != nil {
			return nil, err
		}
	}
	return catalogue, nil
}

// buildServices wires the stores, the tools, the turn runner and the HTTP server.
func (m *Main) buildServices(bg context.Context, catalogue *toolkits.Catalogue) (err error) {
	cfg := m.Config
	m.node = nodeID()
	m.Users = agentstore.NewUsers(m.DB)
	agentStore := agentstore.NewAgents(m.DB, catalogue.Has)
	bus := redisbus.New(m.Redis, cfg.RedisPrefix)
	m.Limiter = redisbus.NewLimiter(m.Redis, cfg.RedisPrefix, map[string]int{
		"messages": cfg.RateMessages, "executions": cfg.RateExecutions, "logins": cfg.RateLogins,
	})
	if cfg.LLM.APIKey != "" {
		if m.openai, err = openai.New(openai.Config{BaseURL: cfg.LLM.BaseURL, APIKey: cfg.LLM.APIKey, Model: cfg.LLM.Model,
			MaxRetries: cfg.LLM.MaxRetries, Tracer: m.tracer("agents/openai")}, m.Log.With("component", "openai")); err != nil {
			return err
		}
	}
	tools := &toolkits.Service{Catalogue: catalogue, Conversations: m.Store, Events: bus, Log: m.Log}
	m.sandbox = &toolkits.Sandbox{Store: m.Store, Tools: tools, Limiter: m.Limiter, PerAgentSessions: cfg.Sandbox.PerAgentSessions,
		SessionTTL: cfg.Sandbox.Engine.SessionTTL, Quota: cfg.ConversationQuota, MaxStateBytes: cfg.Sandbox.Engine.MaxStateBytes,
		Peers: bus, Node: m.node, Log: m.Log.With("component", "executions"), Tracer: m.tracer("toolkits")}
	m.tables = &toolkits.Tables{Files: m.Store}
	var status frontendapi.SandboxStatus
	if m.Engine != nil {
		m.sandbox.Engine, status = m.Engine, m.Engine
	}
	if m.SandboxEngine != nil {
		m.sandbox.Engine = m.SandboxEngine
	}
	if err := m.startRunner(bg, agentStore, catalogue, bus); err != nil {
		return err
	}
	m.Admin = newAdmin(m.Users, m.Store, agentStore, m.sandbox, bus, m.Log.With("component", "admin"))
	m.Hub = frontendapi.NewHub(bus, m.Store, frontendapi.WSConfig{QueueBytes: cfg.WSQueueBytes, CredentialCheck: m.CredentialCheck}, m.Log)
	m.Metrics = prometheus.NewRegistry()
	var metricsPage http.Handler
	if cfg.MetricsAddr == "" {
		metricsPage = metricsHandler(m.Metrics)
	}
	m.HTTP, err = frontendapi.New(frontendapi.Deps{
		Config: frontendapi.Config{AllowedOrigins: cfg.AllowedOrigins, PublicURL: cfg.PublicURL,
			LoginLinkTTL: cfg.LoginLinkTTL, SessionTTL: cfg.SessionTTL,
			TrustedProxies: cfg.TrustedProxies, ProxyHeader: cfg.ProxyHeader}, Log: m.Log,
		Users: m.Users, Sessions: m.Users, Tickets: redisbus.NewTickets(m.Redis, cfg.RedisPrefix), Logins: m.Limiter, Agents: agentStore, Conversations: m.Store, Tools: tools, Catalogue: catalogue, Events: bus,
		Hub: m.Hub, Ready: m.readyChecks(catalogue), Sandbox: m.sandbox, SandboxStatus: status,
		Files: m.Store, Turns: m.Runner, Messages: m.Store, Tables: m.tables, Admin: m.Admin, Metrics: metricsPage, Tracer: m.tracer("frontend-api"),
	})
	if err != nil {
		return err
	}
	if err := m.startLifecycle(bg, bus); err != nil {
		return err
	}
	m.registerMetrics()
	return nil
}

// registerMetrics adds every part's collectors to the registry.
func (m *Main) registerMetrics() {
	m.collectors = slices.Concat(baseCollectors(), m.HTTP.Collectors(), m.Hub.Collectors(), m.Limiter.Collectors(),
		m.Runner.Collectors(), m.sandbox.Collectors())
	if m.openai != nil {
		m.collectors = append(m.collectors, m.openai.Collectors()...)
	}
	if m.Engine != nil {
		m.collectors = append(m.collectors, m.engineMetrics.Collectors()...)
		m.collectors = append(m.collectors, prommetrics.NewStatusCollector(m.Engine))
	}
	if m.Retention != nil {
		m.collectors = append(m.collectors, m.Retention.Collectors()...)
	}
	m.Metrics.MustRegister(m.collectors...)
}

// startRunner builds the turn runner and starts its heartbeat and its listener for
// cancels sent from other nodes.
func (m *Main) startRunner(bg context.Context, agentStore *agentstore.Agents, catalogue *toolkits.Catalogue, bus *redisbus.Bus) (err error) {
	cfg := m.Config
	if m.Runner, err = agents.NewRunner(agents.RunnerDeps{
		Store: m.Store, Agents: agentStore, Catalogue: catalogue,
		Tools:     toolkits.NewTools(m.sandbox, m.limits, toolkits.PackagesText(sandbox.AvailablePackages(cfg.Sandbox.Engine))).WithData(m.tables),
		Providers: m.provider, Events: bus, Cancels: bus, Limiter: m.Limiter, Log: m.Log.With("component", "turns"), Tracer: m.tracer("agents"),
		NodeID: m.node, MaxSteps: 12, MaxDepth: 3, StaleAfter: cfg.TurnStaleAfter,
		Nodes: redisbus.NewNodes(m.Redis, cfg.RedisPrefix), NodeTTL: 3 * time.Second,
		WriteRetry: 15 * time.Second, FinishRetry: 10 * time.Minute,
	}); err != nil {
		return err
	}
	go m.Runner.Run(bg)
	go func() {
		if err := bus.ListenCancels(bg, func(id int64) { m.Runner.CancelLocal(id) }); err != nil && bg.Err() == nil {
			m.Log.Error("cancel listener stopped", "err", err)
		}
	}()

	return nil
}

// readyChecks are what /readyz looks at: Postgres and Redis are required; the server is
// useful without the sandbox, so it is reported, not required.
func (m *Main) readyChecks(catalogue *toolkits.Catalogue) []frontendapi.Check {
	return []frontendapi.Check{
		{Name: "postgres", Fn: func(ctx context.Context) error { return m.DB.Ping(ctx) }},
		{Name: "redis", Fn: func(ctx context.Context) error { return redisReady(ctx, m.Redis) }},
		{Name: "sandbox", Optional: true, Fn: func(context.Context) error {
			if ok, reason := catalogue.Available(toolkits.PyodideSandbox); !ok {
				return errors.New(reason)
			}
			return nil
		}},
	}
}

// limits are the sandbox limits the model's tool description states.
func (m *Main) limits() sandbox.StatusLimits {
	c := m.Config.Sandbox.Engine
	return sandbox.StatusLimits{TimeoutMS: c.Timeout.Milliseconds(), MemoryBytes: c.MemoryBytes, MaxOutput: c.MaxOutput, MaxCode: c.MaxCode,
		Pip: !c.PipOff}
}

// serve listens on the configured address and answers in the background; events past
// their retention are pruned meanwhile.
func (m *Main) serve(bg context.Context) (err error) {
	if m.ln, err = net.Listen("tcp", m.Config.Addr); err != nil {
		return err
	}
	if m.Config.MetricsAddr != "" {
		if m.metricsLn, err = startMetricsServer(m.Config.MetricsAddr, m.Metrics); err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		m.Log.Info("sandchat metrics and pprof listening", "addr", m.metricsLn.ln.Addr().String())
	}
	m.served = make(chan error, 1)
	go func() { m.served <- m.HTTP.Serve(m.ln) }()
	go m.pruneEvents(bg)
	m.Log.Info("sandchat listening", "addr", m.ln.Addr().String())
	return nil
}

// provider picks the model behind an agent: "builtin" or no model (with the builtin
// default) is the offline model; any other model name goes to the OpenAI-compatible
// endpoint.
func (m *Main) provider(a *agents.Agent) (agents.Provider, error) {
	if a.Model == "builtin" || (a.Model == "" && m.Config.LLM.Provider == "builtin") {
		return agents.Builtin{}, nil
	}
	if m.openai == nil {
		return nil, sandchat.Errorf(sandchat.EUNAVAILABLE, "The agent %s uses model %q, but no OpenAI-compatible endpoint is configured (SANDCHAT_LLM_BASE_URL, SANDCHAT_LLM_API_KEY).", a.Name, a.Model)
	}
	return m.openai, nil
}

func nodeID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}

// traced says whether spans go anywhere: the stores' spans cost a little on every
// statement and command, so they are made only then.
func (m *Main) traced() bool {
	_, off := m.Tracing.(noop.TracerProvider)
	return !off
}

// tracer is the tracer of one part of the server.
func (m *Main) tracer(part string) trace.Tracer {
	return m.Tracing.Tracer("github.com/sandchat/sandchat/" + part)
}

// Addr is where the server listens (useful with :0).
func (m *Main) Addr() string { return m.ln.Addr().String() }

// MetricsAddr is where /metrics and pprof listen when SANDCHAT_METRICS_ADDR is set.
func (m *Main) MetricsAddr() string { return m.metricsLn.ln.Addr().String() }

func (m *Main) pruneEvents(ctx context.Context) {
	t := time.NewTicker(10 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := m.Store.Prune(ctx); err != nil {
				m.Log.Warn("prune events", "err", err)
			} else if n > 0 {
				m.Log.Info("pruned events", "count", n)
			}
			if n, err := m.Users.PruneSessions(ctx); err != nil {
				m.Log.Warn("prune login links and sessions", "err", err)
			} else if n > 0 {
				m.Log.Info("pruned expired login links and sessions", "count", n)
			}
		}
	}
}

// Close shuts down gracefully: sockets are told to reconnect, new requests and turns
// are refused, and those in flight get until the shutdown timeout, then the pools
// close.
func (m *Main) Close() error {
	m.closeOnce.Do(func() { m.closeErr = m.close() })
	return m.closeErr
}

// stopMargin is how long before the shutdown deadline the requests and turns still
// running are stopped, so they can answer (503 with Retry-After, a failed turn) and
// be recorded before the pools close: the time the engine gives code to stop, and a
// little for the writes, within a third of the timeout.
func (m *Main) stopMargin(timeout time.Duration) time.Duration {
	return min(timeout/3, m.Config.Sandbox.Engine.Grace+2*time.Second)
}

func (m *Main) close() error {
	timeout := m.Config.ShutdownTimeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	drain, stopDrain := context.WithDeadline(ctx, deadline.Add(-m.stopMargin(timeout)))
	defer stopDrain()
	if m.sandbox != nil {
		// Runs the engine fails once the drain is over were cut off by the shutdown;
		// those it still holds just before the deadline are answered without it.
		defer context.AfterFunc(drain, m.sandbox.Shutdown)()
		lastCall, stopLast := context.WithDeadline(ctx, deadline.Add(-min(timeout/6, 500*time.Millisecond)))
		defer stopLast()
		defer context.AfterFunc(lastCall, m.sandbox.CutOff)()
	}
	var errs []error
	// Turns and requests drain side by side; the heartbeats that keep this node's
	// turns its own (m.cancel) go on until both are done.
	var turns sync.WaitGroup
	if m.Runner != nil {
		turns.Go(func() { m.Runner.Shutdown(drain) })
	}
	if m.HTTP != nil && m.ln != nil {
		if err := m.HTTP.Shutdown(drain, ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			errs = append(errs, err)
		} else if err != nil {
			m.Log.Warn("shutdown deadline reached with requests still running", "timeout", timeout)
		}
		<-m.served
	}
	turns.Wait()
	if m.metricsLn != nil {
		// Scraped until the requests are done, so the last figures of a drain are seen.
		errs = append(errs, m.metricsLn.close(ctx))
	}
	if m.cancel != nil {
		m.cancel()
	}
	if m.Engine != nil {
		// Stops the runs it still holds, whose callers were answered already.
		errs = append(errs, m.Engine.Close())
	}
	if m.sandbox != nil {
		// Outcomes of runs still being written get a last chance before the pool goes.
		wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Second)
		m.sandbox.Wait(wctx)
		wcancel()
	}
	if m.Hub != nil {
		m.Hub.Wait(ctx) // sockets leave their channels before Redis goes
	}
	if m.Hub != nil {
		errs = append(errs, m.Hub.Close())
	}
	if m.Redis != nil {
		errs = append(errs, m.Redis.Close())
	}
	if m.quotaLocks != nil {
		m.quotaLocks.Close()
	}
	if m.DB != nil {
		m.DB.Close()
	}
	if m.stopTracing != nil {
		// What is left of the spans, with a bound of its own: the collector may be away.
		tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, m.stopTracing(tctx))
		tcancel()
	}
	m.Log.Info("sandchat stopped")
	return errors.Join(errs...)
}

// printSignIn writes where the server listens and how to sign in as its admin: a
// one-time login link for a browser and the API token kept in tokenFile.
func (m *Main) printSignIn(ctx context.Context, tokenFile string, w io.Writer) error {
	ctx = sandchat.WithCLI(ctx, osUser()) // the admin and link it makes are the operator's
	token, err := m.adminToken(ctx, tokenFile)
	if err != nil {
		return err
	}
	admin, err := m.Users.Authenticate(ctx, token)
	if err != nil {
		return err
	}
	base := linkBase(m.Config.PublicURL, m.Addr())
	link, expires, err := loginLink(ctx, m.Users, admin.ID, m.Config.LoginLinkTTL, base)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "sandchat listening on %s\n\n", linkBase("", m.Addr()))
	fmt.Fprintf(w, "Sign in: open %s\n  (one use, until %s; `sandchat user login-link %s` makes another)\n\n",
		link, expires.Local().Format("15:04 MST"), userFlag(ctx, m.Users, admin))
	fmt.Fprintf(w, "API token of %s: %s\n  (kept in %s)\n", admin.Name, token, tokenFile)
	return nil
}

// adminToken returns the token kept in path if it still works, else creates an admin
// and keeps its token there (readable by the owner only).
func (m *Main) adminToken(ctx context.Context, path string) (string, error) {
	if raw, err := os.ReadFile(path); err == nil {
		token := strings.TrimSpace(string(raw))
		if u, err := m.Users.Authenticate(ctx, token); err == nil && u.Admin {
			return token, nil
		}
	}
	_, token, err := m.Users.CreateUser(ctx, "admin", true)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write admin token file: %w", err)
	}
	return token, nil
}
