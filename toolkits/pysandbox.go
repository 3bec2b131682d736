package toolkits

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
)

// Engine is what the Python sandbox tool needs of the sandbox engine.
type Engine interface {
	// Config is the engine's configuration: its limits check a run before it is recorded.
	Config() sandbox.Config
	// Execute runs a run: its user's share of the node is waited for, and its /data
	// asked for under the session's lease (sandbox.Request).
	Execute(ctx context.Context, key string, req sandbox.Request) (sandbox.Result, error)
	Session(ctx context.Context, key string) (sandbox.SessionInfo, error)
	// StateBytes is what the sessions' saved states hold together; zero for one with none.
	StateBytes(ctx context.Context, keys ...string) (int64, error)
	Reset(ctx context.Context, key string) error
	// Forget deletes a session for good, in every tier, its live process included.
	Forget(ctx context.Context, key string) error
	// Loadable tells whether a session could load a package of the distribution now.
	Loadable(ctx context.Context, name string) bool
}

// Peers reach the other nodes (redisbus.Bus).
type Peers interface {
	PublishForget(ctx context.Context, node, key string) error
}

// ExecutionStore records runs with their artifacts and hands the conversation's
// uploads to the sandbox.
type ExecutionStore interface {
	// BeginExecution records a run as pending, before it starts.
	BeginExecution(ctx context.Context, ex conversations.Execution) (id int64, err error)
	// FinishExecution stores the outcome and artifacts of a pending run in one
	// transaction; failure set marks a run the engine could not complete. Retrying it
	// after an error is safe. Artifacts past ex.Quota are not kept, and notKept (also in
	// the record's stderr) says which.
	FinishExecution(ctx context.Context, id int64, ex conversations.Execution, failure string) (files []conversations.FileRef, notKept string, err error)
	// RecordReset notes a reset of the session, after the runs recorded so far or, with
	// before, after those recorded before that run.
	RecordReset(ctx context.Context, convID int64, key string, before int64) error
	// DataFiles returns the conversation's uploads, for /data, with the bytes of those
	// whose version is not the one have names.
	DataFiles(ctx context.Context, convID int64, have map[string]string) ([]conversations.DataFile, error)
	// FileUsage is what the conversation's files take and the sessions its runs used.
	FileUsage(ctx context.Context, convID int64) (conversations.FileUsage, error)
	// UploadFile stores an upload (editors) if it fits in q, under the conversation's
	// quota lock.
	UploadFile(ctx context.Context, convID int64, name, contentType string, data []byte, q conversations.Quota) (ref conversations.FileRef, replaced bool, err error)
	// LockQuota takes the conversation's quota lock for a write the store does not make,
	// and returns what its files take then; unlock lets the next writer in.
	LockQuota(ctx context.Context, convID int64) (files conversations.FileUsage, unlock func(), err error)
}

// Limiter admits or refuses an action of the user in ctx (per-user rate limits).
type Limiter interface {
	Allow(ctx context.Context, action string) error
}

// Sandbox runs Python for conversations: the REST endpoint and the pyodide_sandbox tool
// both go through it, so every run is checked, limited and recorded the same way.
type Sandbox struct {
	Engine  Engine
	Store   ExecutionStore
	Tools   *Service
	Limiter Limiter
	// PerAgentSessions gives each agent of a swarm its own interpreter in a
	// conversation; by default they share the conversation's.
	PerAgentSessions bool
	// SessionTTL is how long the engine keeps an idle session; replay never revives a
	// session that had expired (zero: no expiry).
	SessionTTL time.Duration
	// Quota bounds what one conversation stores: uploads, artifacts and the Python state
	// of all its sessions together (zero: conversations.DefaultQuota). See quota.go.
	Quota int64
	// MaxStateBytes is the engine's own limit on one session's state: a refused save
	// names the conversation's quota only when the quota left less than this.
	MaxStateBytes int64
	// Peers, when set, are told of each session deleted for good, as Node: a node that
	// holds its live process closes it at once instead of when it falls idle.
	Peers  Peers
	Node   string
	Log    *slog.Logger
	Tracer trace.Tracer // optional: a span for each run

	background sync.WaitGroup
	closing    atomic.Bool
	abandoned  atomic.Bool // the process is going away: background writes give up
	cutOnce    sync.Once
	cut        chan struct{}
	cutClose   sync.Once

	metricsOnce sync.Once
	refusals    *prometheus.CounterVec // by what (metrics.go)
}

// Shutdown marks the server as stopping: a run the engine fails from now on was cut
// off by the shutdown, and is reported so rather than as an engine failure.
func (s *Sandbox) Shutdown() { s.closing.Store(true) }

// CutOff answers at once the runs the engine still holds, as the shutdown's deadline
// comes: their callers get a 503 instead of a connection cut when the process exits.
// Their outcomes are recorded when the engine lets go of them (see Wait).
func (s *Sandbox) CutOff() { s.cutClose.Do(func() { close(s.cutCh()) }) }

func (s *Sandbox) cutCh() chan struct{} {
	s.cutOnce.Do(func() { s.cut = make(chan struct{}) })
	return s.cut
}

// loadable tells whether this deployment's sessions could load package name now.
func (s *Sandbox) loadable(ctx context.Context, name string) bool {
	return s != nil && s.Engine != nil && s.Engine.Loadable(ctx, name)
}

// SessionKey is the interpreter a run uses: the conversation's, or with per-agent
// sessions, the agent's within it.
func (s *Sandbox) SessionKey(convID int64, agentID *int64) string {
	key := "conv:" + strconv.FormatInt(convID, 10)
	if s.PerAgentSessions && agentID != nil {
		key += "/agent:" + strconv.FormatInt(*agentID, 10)
	}
	return key
}

// errCutOff refuses a run that would start as the shutdown's deadline comes.
var errCutOff = &sandchat.Error{Code: sandchat.EUNAVAILABLE, RetryAfter: 2,
	Message: "The server is shutting down; run the code again."}

// errNotKept answers a run that ran but whose session state the engine could not save.
var errNotKept = &sandchat.Error{Code: sandchat.EUNAVAILABLE, RetryAfter: 2,
	Message: "The code ran, but its session state could not be saved, so its effects were not kept: the session continues from the last state that was saved. Run it again."}

var errNoEngine = sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python sandbox is switched off in this deployment (SANDCHAT_SANDBOX_ENABLED=false).")

// finishWait is how long the outcome of a run is retried while the caller waits: a
// Postgres restart takes a few seconds; past them the caller gets the result with a
// notice, and finishLater goes on.
var finishWait = sandchat.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, For: 4 * time.Second}

// Wait returns when the background writes of run outcomes are done (those of runs cut
// off too, once the engine has let go of them), or when ctx ends: then they give up
// (the store is about to close) and the logs name the runs left pending.
func (s *Sandbox) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.background.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.abandoned.Store(true)
	}
}

func (s *Sandbox) tracer() trace.Tracer {
	if s.Tracer == nil {
		return noop.Tracer{}
	}
	return s.Tracer
}

func (s *Sandbox) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// ExecuteDirect is the REST path: the caller must be able to edit the conversation and
// the sandbox must be on for its primary agent.
func (s *Sandbox) ExecuteDirect(ctx context.Context, convID int64, code string, timeout time.Duration) (Run, error) {
	conv, err := s.requireOn(ctx, convID)
	if err != nil {
		return Run{}, err
	}
	return s.Execute(ctx, RunRequest{ConversationID: convID, AgentID: conv, Code: code, Timeout: timeout})
}

// Session describes the conversation's interpreter (view access).
func (s *Sandbox) Session(ctx context.Context, convID int64) (sandbox.SessionInfo, error) {
	if s.Engine == nil {
		return sandbox.SessionInfo{}, errNoEngine
	}
	ts, err := s.Tools.Conversations.ToolSettings(ctx, convID)
	if err != nil {
		return sandbox.SessionInfo{}, err
	}
	return s.Engine.Session(ctx, s.SessionKey(convID, ts.Conversation.AgentID))
}

// Reset forgets the conversation's interpreter state (edit access). The reset is
// recorded first, so a replay after it can never bring back what came before.
func (s *Sandbox) Reset(ctx context.Context, convID int64) error {
	if s.Engine == nil {
		return errNoEngine
	}
	ts, err := s.requireEdit(ctx, convID)
	if err != nil {
		return err
	}
	key := s.SessionKey(convID, ts.Conversation.AgentID)
	if err := s.Store.RecordReset(ctx, convID, key, 0); err != nil {
		return err
	}
	return s.Engine.Reset(ctx, key)
}

// ForgetConversation deletes the Python state of every session of the conversation
// (owner only, as deleting it is): called before the conversation is deleted, so that a
// failure leaves both in place and the delete can be asked again.
func (s *Sandbox) ForgetConversation(ctx context.Context, convID int64) error {
	ts, err := s.Tools.Conversations.ToolSettings(ctx, convID)
	if err != nil {
		return err
	}
	if err := sandchat.CheckRole(ts.Conversation.Role, "Conversation", sandchat.RoleOwner); err != nil {
		return err
	}
	if s.Engine == nil {
		return nil
	}
	files, err := s.Store.FileUsage(ctx, convID)
	if err != nil {
		return err
	}
	for _, key := range s.sessions(convID, files) {
		if err := s.Engine.Forget(ctx, key); err != nil {
			return err
		}
		if s.Peers == nil {
			continue
		}
		// The state is gone in every tier: a node that misses this closes its process
		// when it falls idle, since its save is refused.
		if err := s.Peers.PublishForget(ctx, s.Node, key); err != nil {
			s.log().WarnContext(ctx, "tell the other nodes of a deleted session", "session", key, "err", err)
		}
	}
	return nil
}

func (s *Sandbox) requireEdit(ctx context.Context, convID int64) (conversations.ToolSettings, error) {
	ts, err := s.Tools.Conversations.ToolSettings(ctx, convID)
	if err != nil {
		return ts, err
	}
	if r := ts.Conversation.Role; !sandchat.CanEdit(r) {
		return ts, sandchat.Errorf(sandchat.EFORBIDDEN, "Your role (%s) does not allow running code in this conversation.", r)
	}
	return ts, nil
}

// requireOn checks edit access and that the sandbox is on, from one read of the
// conversation's settings, and returns its primary agent.
func (s *Sandbox) requireOn(ctx context.Context, convID int64) (agentID *int64, err error) {
	ts, err := s.requireEdit(ctx, convID)
	if err != nil {
		return nil, err
	}
	for _, st := range s.Tools.Catalogue.Resolve(ts.Overrides, ts.Agent) {
		if st.ID != PyodideSandbox {
			continue
		}
		if st.Enabled {
			return ts.Conversation.AgentID, nil
		}
		if !st.Available {
			return nil, sandchat.Errorf(sandchat.EUNAVAILABLE, "The Python sandbox is unavailable: %s", st.UnavailableReason)
		}
		return nil, sandchat.Errorf(sandchat.ECONFLICT, "The Python sandbox is off for this conversation (source: %s). Switch it on in the chat toolbar (Internal tools → Python sandbox) or with PUT /api/v1/conversations/%d/internal-tools/pyodide_sandbox {\"enabled\": true}.", st.Source, convID)
	}
	return nil, sandchat.Errorf(sandchat.EINTERNAL, "pyodide_sandbox missing from the catalogue")
}

// PackagesText says which packages beyond the standard library an import can load, for
// the tool description: all of them when few, a count and well-known examples when many.
func PackagesText(pkgs []string) string {
	switch {
	case len(pkgs) == 0:
		return " (no other packages are installed)"
	case len(pkgs) <= 40:
		return ", plus " + strings.Join(pkgs, ", ")
	}
	var known []string
	for _, p := range []string{"numpy", "pandas", "matplotlib", "scipy", "scikit-learn", "sympy", "pillow", "networkx"} {
		if slices.Contains(pkgs, p) {
			known = append(known, p)
		}
	}
	return fmt.Sprintf(", plus %d packages of the Pyodide distribution (%s, …)", len(pkgs), strings.Join(known, ", "))
}

// pipText says how packages outside the distribution can be added, if they can.
func pipText(on bool) string {
	if !on {
		return " Installing other packages is turned off here."
	}
	return " Pure-Python packages from the package index can be added with `import micropip; await micropip.install(\"name\")` (top-level await works); compiled ones cannot. Python has no network access unless the deployment allows it."
}

// PythonToolSpec is how the pyodide_sandbox tool is offered to a model. The description
// tells the model what persists, where files are, and the limits.
func PythonToolSpec(limits sandbox.StatusLimits, packages string) (name, description string, parameters json.RawMessage) {
	description = fmt.Sprintf(`Run Python 3 code (Pyodide, CPython in WebAssembly) in this conversation's persistent session.
State persists between calls and turns: variables, imports, functions, classes and files in the working directory (/home/pyodide) stay until the session is reset or expires; if a result says the session expired or started fresh, re-run your setup.
The value of a trailing expression is returned as its repr, with stdout and stderr. Files the user uploaded are read-only under /data, in their folders (/data/reports/q1.csv); /data is on sys.path, so an uploaded mymodule.py is imported with import mymodule. Only the working directory is kept: files written elsewhere (/tmp, other folders) vanish and are not shown to the user, so write files there with relative paths. Files you create or change in the working directory come back to the user as artifacts (images, CSV, ...); with matplotlib, plt.show() saves each open figure as a PNG.
Packages: the standard library%s. An import of one of these loads it automatically; anything else raises ModuleNotFoundError.%s
Limits per call: %d s timeout (then KeyboardInterrupt; state is kept), %d MiB of memory (MemoryError), %d KiB of stdout/stderr (truncated), %d KiB of code.`,
		packages, pipText(limits.Pip), limits.TimeoutMS/1000, limits.MemoryBytes>>20, limits.MaxOutput>>10, limits.MaxCode>>10)
	parameters = json.RawMessage(`{"type":"object","properties":{"code":{"type":"string","description":"Python code to run. The last expression's value is returned."}},"required":["code"],"additionalProperties":false}`)
	return PyodideSandbox, description, parameters
}

// CheckPreload tells whether mods can be imported before a run: module names, within
// the engine's limit.
func CheckPreload(mods []string) error { return sandbox.CheckPreload(mods) }
