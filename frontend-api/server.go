// Package frontendapi is the HTTP and WebSocket face of sandchat: REST handlers, auth,
// problem+json errors, the WebSocket hub with its Redis fan-out, health and metrics.
package frontendapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/agents"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/toolkits"
)

// Check is one dependency /readyz looks at.
type Check struct {
	Name string
	// Optional checks are reported but do not make the node unready.
	Optional bool
	Fn       func(ctx context.Context) error
}

// Config is what the HTTP layer needs from the process configuration.
type Config struct {
	// AllowedOrigins are the browser origins allowed to open WebSockets and to act with a
	// browser session; requests with no Origin header (non-browser clients) are allowed
	// to use a token.
	AllowedOrigins []string
	// PublicURL is where browsers reach the server (https://chat.example.com), for the
	// login links admins make and the session cookie's Secure flag; "" takes the
	// request's own address.
	PublicURL string
	// LoginLinkTTL is how long a login link works; SessionTTL how long the browser
	// session it starts lasts.
	LoginLinkTTL   time.Duration
	SessionTTL     time.Duration
	RequestTimeout time.Duration
	// ExecutionTimeout bounds a direct sandbox run: above the engine's largest timeout.
	ExecutionTimeout time.Duration
	BodyLimit        int
	WS               WSConfig
	// TrustedProxies are the addresses (IPs or CIDR ranges) of the proxies in front of
	// the server: only their ProxyHeader (X-Forwarded-For unless set) and
	// X-Forwarded-Proto are believed. None: the peer is the client.
	TrustedProxies []string
	ProxyHeader    string
}

// ToolSettings reads and changes a conversation's internal tools (toolkits.Service).
type ToolSettings interface {
	ConversationTools(ctx context.Context, convID int64) ([]toolkits.State, error)
	SetConversationTool(ctx context.Context, convID int64, toolID string, enabled *bool) (toolkits.State, error)
}

// ToolCatalogue lists the internal tools (toolkits.Catalogue).
type ToolCatalogue interface {
	List() []toolkits.Tool
}

// UserEvents reaches every socket of one user, on every node.
type UserEvents interface {
	PublishUser(ctx context.Context, userID int64, ev conversations.Event) error
}

// SandboxService is the direct side of the Python sandbox: runs from the REST
// endpoint, and the session they share with the model (toolkits.Sandbox).
type SandboxService interface {
	ExecuteDirect(ctx context.Context, convID int64, code string, timeout time.Duration) (toolkits.Run, error)
	Session(ctx context.Context, convID int64) (sandbox.SessionInfo, error)
	Reset(ctx context.Context, convID int64) error
	// ForgetConversation deletes the Python state of the conversation's sessions (its
	// owner, before the conversation itself is deleted).
	ForgetConversation(ctx context.Context, convID int64) error
	// UploadFile stores an upload within the conversation's storage quota.
	UploadFile(ctx context.Context, convID int64, name, contentType string, data []byte) (ref conversations.FileRef, replaced bool, err error)
	// Storage is what the conversation holds against its quota.
	Storage(ctx context.Context, convID int64) (conversations.Storage, error)
}

// Deps is what the Server is built from. Every service is required except
// SandboxStatus (without it the status endpoint says the engine is not configured)
// and Ready (no checks: always ready).
type Deps struct {
	Config        Config
	Log           *slog.Logger
	Users         sandchat.UserService
	Sessions      sandchat.SessionService
	Logins        LoginLimiter // optional: without it sign-ins are not counted
	Tickets       sandchat.TicketService
	Agents        agents.Service
	Conversations conversations.Service
	Tools         ToolSettings
	Catalogue     ToolCatalogue
	Events        UserEvents
	Hub           *Hub
	Ready         []Check
	Sandbox       SandboxService
	SandboxStatus SandboxStatus
	Files         FileStore
	Turns         TurnService
	Messages      MessageStore
	Tables        TablePreviewer // optional: without it previews are 503
	Admin         AdminService
	// Metrics, when set, is served at /metrics; main leaves it out when the metrics
	// have a listener of their own (SANDCHAT_METRICS_ADDR).
	Metrics http.Handler
	// Tracer, when set, makes a span of each request (OpenTelemetry).
	Tracer trace.Tracer
}

// Server is the Fiber app with everything its handlers call.
type Server struct {
	app     *fiber.App
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	users         sandchat.UserService
	sessions      sandchat.SessionService
	logins        LoginLimiter
	tickets       sandchat.TicketService
	agents        agents.Service
	conversations conversations.Service
	tools         ToolSettings
	catalogue     ToolCatalogue
	events        UserEvents
	hub           *Hub
	ready         []Check
	sandbox       SandboxService
	sandboxStatus SandboxStatus
	files         FileStore
	turns         TurnService
	messages      MessageStore
	tables        TablePreviewer
	admin         AdminService
	metricsPage   http.Handler
	tracer        trace.Tracer
	// proxies are the trusted proxies' addresses (Config.TrustedProxies).
	proxies []netip.Prefix
	// exports bounds the exports the node prepares at once (sendExport).
	exports exports

	// base is the parent of every request's context: shutdown ends it, with
	// errShutdown, for the requests still running when the drain is over.
	base         context.Context
	stopRequests context.CancelCauseFunc
}

// errShutdown is why a request was stopped by the shutdown; the client gets
// shutdownProblem.
var errShutdown = errors.New("the server shut down during the request")

var shutdownProblem = &sandchat.Error{Code: sandchat.EUNAVAILABLE, RetryAfter: 2,
	Message: "The server is shutting down and stopped this request before it finished; send it again."}

// headerTimeout bounds the wait for a request's headers.
const headerTimeout = 5 * time.Second

// New builds the app with its routes, refusing deps that lack a required service.
func New(d Deps) (_ *Server, err error) {
	var missing []string
	for name, ok := range map[string]bool{
		"Log": d.Log != nil, "Users": d.Users != nil, "Sessions": d.Sessions != nil, "Tickets": d.Tickets != nil, "Agents": d.Agents != nil, "Conversations": d.Conversations != nil,
		"Tools": d.Tools != nil, "Catalogue": d.Catalogue != nil, "Events": d.Events != nil, "Hub": d.Hub != nil,
		"Sandbox": d.Sandbox != nil, "Files": d.Files != nil, "Turns": d.Turns != nil, "Messages": d.Messages != nil,
		"Admin": d.Admin != nil,
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("frontendapi.New: missing %s", strings.Join(missing, ", "))
	}
	cfg := d.Config
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = time.Minute
	}
	if cfg.ExecutionTimeout == 0 {
		cfg.ExecutionTimeout = 6 * time.Minute
	}
	if cfg.BodyLimit == 0 {
		cfg.BodyLimit = 16 << 20
	}
	if cfg.LoginLinkTTL == 0 {
		cfg.LoginLinkTTL = DefaultLoginLinkTTL
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.ProxyHeader == "" {
		cfg.ProxyHeader = fiber.HeaderXForwardedFor
	}
	s := &Server{
		cfg: cfg, log: d.Log, metrics: newMetrics(),
		users: d.Users, sessions: d.Sessions, logins: d.Logins, tickets: d.Tickets, agents: d.Agents, conversations: d.Conversations, tools: d.Tools, catalogue: d.Catalogue,
		events: d.Events, hub: d.Hub, ready: d.Ready, sandbox: d.Sandbox, sandboxStatus: d.SandboxStatus,
		files: d.Files, turns: d.Turns, messages: d.Messages, tables: d.Tables, admin: d.Admin, metricsPage: d.Metrics, tracer: d.Tracer,
	}
	if s.tracer == nil {
		s.tracer = noop.Tracer{}
	}
	s.base, s.stopRequests = context.WithCancelCause(context.Background())
	if s.proxies, err = parseProxies(cfg.TrustedProxies); err != nil {
		return nil, err
	}
	s.app = fiber.New(fiber.Config{
		ErrorHandler:          s.errorHandler,
		DisableStartupMessage: true,
		BodyLimit:             cfg.BodyLimit,
		// Headers must arrive within a few seconds: fasthttp waits out the whole read
		// timeout on some malformed headers (a line without a colon). The body then
		// gets the minute an upload may need.
		ReadTimeout: headerTimeout,
		IdleTimeout: 2 * time.Minute,
		AppName:     "sandchat",

		// Behind proxies, what they say of the client (its address, TLS) is believed
		// from them only.
		EnableTrustedProxyCheck: len(s.proxies) > 0,
		TrustedProxies:          cfg.TrustedProxies,
		ProxyHeader:             cfg.ProxyHeader,
	})
	s.app.Server().HeaderReceived = func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
		return fasthttp.RequestConfig{ReadTimeout: time.Minute}
	}
	s.routes()
	return s, nil
}

// App exposes the Fiber app, for tests that call it in-process.
func (s *Server) App() *fiber.App { return s.app }

func (s *Server) routes() {
	app := s.app
	app.Use(s.observe)
	app.Use(recover.New(recover.Config{EnableStackTrace: true}))
	app.Use(s.requestContext)

	app.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	app.Get("/readyz", s.readyz)
	if s.metricsPage != nil {
		app.Get("/metrics", adaptor.HTTPHandler(s.metricsPage))
	}
	s.webRoutes()
	// Before the group: they sign in, or say whether the cookie does.
	app.Post("/api/v1/auth/login", s.login)
	app.Get("/api/v1/auth/session", s.session)

	v1 := app.Group("/api/v1", s.authenticate)
	v1.Post("/auth/logout", s.logout)
	v1.Post("/tickets", s.createTicket)
	v1.Get("/me", s.me)
	v1.Post("/users", s.createUser)
	v1.Post("/users/:id/login-link", s.createLoginLink)
	v1.Get("/internal-tools", s.listInternalTools)

	v1.Post("/agents", s.createAgent)
	v1.Get("/agents", s.listAgents)
	v1.Get("/agents/:id", s.getAgent)
	v1.Put("/agents/:id", s.updateAgent)
	v1.Delete("/agents/:id", s.deleteAgent)
	s.memberRoutes(v1, "/agents/:id/members", s.agents, nil)

	v1.Post("/conversations", s.createConversation)
	v1.Get("/conversations", s.listConversations)
	v1.Get("/conversations/:id", s.getConversation)
	v1.Patch("/conversations/:id", s.renameConversation)
	v1.Delete("/conversations/:id", s.deleteConversation)
	s.memberRoutes(v1, "/conversations/:id/members", s.conversations, s.revokeSockets)
	v1.Get("/conversations/:id/internal-tools", s.getConversationTools)
	v1.Put("/conversations/:id/internal-tools/:tool", s.putConversationTool)

	s.sandboxRoutes(v1)
	s.previewRoutes(v1)
	s.turnRoutes(v1)
	s.adminRoutes(v1)
	v1.Get("/ws", s.websocket())

	app.Use(func(c *fiber.Ctx) error {
		c.Locals(localUnmatched, true)
		return sandchat.Errorf(sandchat.ENOTFOUND, "No route for %s %s.", c.Method(), c.Path())
	})
}

// requestContext gives handlers a context with a deadline that does not hang on
// fasthttp's, which only ends at shutdown. WebSockets make their own.
func (s *Server) requestContext(c *fiber.Ctx) error {
	if strings.HasSuffix(c.Path(), "/ws") {
		return c.Next()
	}
	timeout := s.cfg.RequestTimeout
	// A run, and what reads or deletes all of a user's data, may take minutes.
	if p := c.Path(); strings.HasSuffix(p, "/sandbox/executions") || strings.HasSuffix(p, "/export") || strings.HasSuffix(p, "/erase") {
		timeout = s.cfg.ExecutionTimeout
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), timeout) // observe's: s.base's, with the request's id
	defer cancel()
	ctx, report := sandchat.WithRateReport(ctx)
	c.SetUserContext(ctx)
	err := c.Next()
	setRateLimitHeaders(c, report)
	return err
}

// Serve answers on ln until Shutdown. With no allowed origins configured, the
// server's own address is allowed (known only now when it listens on port 0), and its
// public address.
func (s *Server) Serve(ln net.Listener) error {
	if len(s.cfg.AllowedOrigins) == 0 {
		s.cfg.AllowedOrigins = DefaultOrigins(ln.Addr().String())
		if o := originOf(s.cfg.PublicURL); o != "" && !slices.Contains(s.cfg.AllowedOrigins, o) {
			s.cfg.AllowedOrigins = append(s.cfg.AllowedOrigins, o)
		}
	}
	return s.app.Listener(ln)
}

// DefaultOrigins allows the server's own pages, under both loopback names.
func DefaultOrigins(addr string) []string {
	host, port, _ := net.SplitHostPort(addr)
	out := []string{"http://" + net.JoinHostPort(host, port)}
	if host == "127.0.0.1" || host == "localhost" || host == "" || host == "0.0.0.0" || host == "::" {
		out = append(out, "http://localhost:"+port, "http://127.0.0.1:"+port)
	}
	return out
}

// originOf is the origin of an absolute URL (scheme://host[:port]), or "".
func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// Shutdown stops accepting, tells WebSocket clients to reconnect elsewhere and waits
// for in-flight requests until ctx ends. Requests still running when drain ends are
// stopped: their context ends, so they answer 503 with Retry-After while there is
// time to, instead of having their connection cut when the process exits.
func (s *Server) Shutdown(drain, ctx context.Context) error {
	s.hub.CloseAll()
	stop := context.AfterFunc(drain, func() { s.stopRequests(errShutdown) })
	defer stop()
	return s.app.ShutdownWithContext(ctx)
}

func (s *Server) readyz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 3*time.Second)
	defer cancel()
	status := fiber.Map{}
	ok := true
	for _, ch := range s.ready {
		if err := ch.Fn(ctx); err != nil {
			ok = ok && ch.Optional
			status[ch.Name] = err.Error()
		} else {
			status[ch.Name] = "ok"
		}
	}
	if !ok {
		c.Status(fiber.StatusServiceUnavailable)
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(defaultRetryAfter))
	}
	return c.JSON(fiber.Map{"ready": ok, "checks": status})
}

// paramID reads a numeric path parameter; anything else is a resource that cannot exist.
func paramID(c *fiber.Ctx, name string) (int64, error) {
	id, err := strconv.ParseInt(c.Params(name), 10, 64)
	if err != nil || id <= 0 {
		return 0, sandchat.Errorf(sandchat.ENOTFOUND, "Not found: %s %q is not an id.", name, c.Params(name))
	}
	return id, nil
}

// decode reads a JSON body strictly: unknown fields, trailing data and wrong types are
// the client's error, said in words.
func decode(c *fiber.Ctx, v any) error {
	body := c.Body()
	if len(bytes.TrimSpace(body)) == 0 {
		return sandchat.Errorf(sandchat.EINVALID, "A JSON body is required.")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return sandchat.Errorf(sandchat.EINVALID, "Malformed JSON body: %s.", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return sandchat.Errorf(sandchat.EINVALID, "Malformed JSON body: data after the JSON value.")
	}
	// Postgres text cannot hold NUL, and no name, title, prompt or message needs one:
	// refuse it here, naming the field, instead of failing deep in a store.
	if bytes.Contains(body, []byte(`\u0000`)) {
		var doc any
		if err := json.Unmarshal(body, &doc); err == nil {
			if field, ok := nulField(doc, ""); ok {
				return sandchat.Errorf(sandchat.EINVALID, "%s must not contain NUL characters (\\u0000).", field)
			}
		}
	}
	return nil
}

// nulField returns the path of the first string (or key) in v that holds a NUL.
func nulField(v any, path string) (string, bool) {
	name := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch x := v.(type) {
	case string:
		if path == "" {
			path = "the body"
		}
		return path, strings.ContainsRune(x, 0)
	case map[string]any:
		for k, e := range x {
			if strings.ContainsRune(k, 0) {
				return name(strings.ReplaceAll(k, "\x00", `\u0000`)), true
			}
			if f, ok := nulField(e, name(k)); ok {
				return f, true
			}
		}
	case []any:
		for i, e := range x {
			if f, ok := nulField(e, fmt.Sprintf("%s[%d]", path, i)); ok {
				return f, true
			}
		}
	}
	return "", false
}

// revokeSockets tells every socket of a removed member, on every node, to stop
// delivering the conversation. The removal is committed: if the publish fails, the
// next replay of that socket is refused by the access check and stops it as well.
func (s *Server) revokeSockets(ctx context.Context, convID, userID int64) {
	data, _ := json.Marshal(map[string]int64{"conversation_id": convID})
	if err := s.events.PublishUser(ctx, userID, conversations.Event{Type: EventAccessRevoked, Data: data}); err != nil {
		s.log.WarnContext(ctx, "publish access revocation", "conversation_id", convID, "user_id", userID, "err", err)
	}
}
