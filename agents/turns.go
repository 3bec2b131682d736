package agents

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/toolkits"
)

// DelegateTool is the tool swarm mode offers a parent to hand work to a child agent.
const DelegateTool = toolkits.DelegateTool

// TurnStore is what turns need of the conversation store. Every method that writes an
// event writes it in the same transaction as the row it describes.
type TurnStore interface {
	FindConversationByID(ctx context.Context, id int64) (*conversations.Conversation, error)
	ToolSettings(ctx context.Context, id int64) (conversations.ToolSettings, error)
	StartTurn(ctx context.Context, convID int64, nodeID, owner, content string) (conversations.Turn, conversations.Message, []conversations.Event, error)
	// RetryTurn starts a turn that answers the latest user message again.
	// A non-nil content replaces the message's text first (its author only).
	RetryTurn(ctx context.Context, convID, messageID int64, nodeID, owner string, content *string) (conversations.Turn, []conversations.Event, error)
	// SetAnswer makes turnID the current answer version of a user message.
	SetAnswer(ctx context.Context, convID, messageID, turnID int64) (conversations.Message, conversations.Event, error)
	History(ctx context.Context, convID int64) ([]conversations.Message, error)
	Turn(ctx context.Context, convID, turnID int64) (conversations.Turn, error)
	// The writes of a turn are fenced: they fail with conversations.ErrFenced once the
	// turn no longer runs for f.Owner.
	AddMessage(ctx context.Context, f conversations.Fence, m conversations.Message) (conversations.Message, conversations.Event, error)
	Emit(ctx context.Context, f conversations.Fence, convID int64, typ string, agentPath []string, data any) (conversations.Event, error)
	FinishTurn(ctx context.Context, f conversations.Fence, convID int64, status, errText string, usage *conversations.Usage) (*conversations.Event, error)
	StartHandoff(ctx context.Context, f conversations.Fence, convID, from, to int64, path []string, task string) (int64, conversations.Event, error)
	FinishHandoff(ctx context.Context, f conversations.Fence, convID, id int64, path []string, status, result string) (conversations.Event, error)
	// Heartbeat renews this node's turns and returns the ones it no longer runs and
	// the ones whose cancel was requested.
	Heartbeat(ctx context.Context, nodeID string, turnIDs []int64) (lost, cancelled []int64, err error)
	// RequestCancel records a cancel on a running turn; false when it no longer runs.
	RequestCancel(ctx context.Context, convID, turnID int64) (bool, error)
	QuietNodes(ctx context.Context, quietAfter time.Duration) ([]string, error)
	FailStaleTurns(ctx context.Context, staleAfter, quietAfter time.Duration, deadNodes []string, reason string) ([]conversations.Event, error)
}

// Nodes tells which nodes are alive: each renews a key with a short TTL, so a node that
// was killed or paused is known dead within seconds, not after the stale limit.
type Nodes interface {
	Beat(ctx context.Context, nodeID string, ttl time.Duration) error
	Alive(ctx context.Context, nodeIDs []string) (map[string]bool, error)
}

// AgentLoader reads agents without a permission check: the turn acts for a user who was
// authorized on the conversation, and children were checked when they were set.
type AgentLoader interface {
	LoadAgent(ctx context.Context, id int64) (*Agent, error)
}

// CancelBus carries cancel requests to the node that runs the turn.
type CancelBus interface {
	PublishCancel(ctx context.Context, turnID int64) error
}

// ToolResolver tells which internal tools are on for an agent, from the conversation's
// overrides and the agent's own settings (toolkits.Catalogue).
type ToolResolver interface {
	Resolve(overrides, agent map[string]bool) []toolkits.State
	ResolveChild(overrides, child map[string]bool) []toolkits.State
}

// RunnerDeps is what a Runner is built from. Durations left zero get the defaults
// NewRunner names.
type RunnerDeps struct {
	Store     TurnStore
	Agents    AgentLoader
	Catalogue ToolResolver
	Tools     *toolkits.Tools // each agent's toolbox in a turn
	Providers func(a *Agent) (Provider, error)
	Events    conversations.Publisher
	Cancels   CancelBus
	Limiter   toolkits.Limiter // optional: no rate limit on messages without it
	Log       *slog.Logger
	Tracer    trace.Tracer // optional: a span for each turn and each tool call
	NodeID    string
	MaxSteps  int // model calls per agent per turn (12)
	MaxDepth  int // nesting of delegations (3)
	// StaleAfter: a running turn not renewed for this long is failed (30s).
	StaleAfter time.Duration
	// Nodes, when set, makes a dead node's turns fail once its liveness key expired
	// (NodeTTL, 3s) and they went QuietAfter (NodeTTL+1s) without renewal, long
	// before StaleAfter.
	Nodes       Nodes
	NodeTTL     time.Duration
	QuietAfter  time.Duration
	WriteRetry  time.Duration // how long a turn's write is retried while Postgres is away (15s)
	FinishRetry time.Duration // how long the end of a turn is retried (10m)
}

// Runner runs assistant turns. A turn belongs to the server: it goes on when the client
// that started it goes away, and is stopped only by cancel, an error, or shutdown.
type Runner struct {
	store       TurnStore
	agents      AgentLoader
	catalogue   ToolResolver
	tools       *toolkits.Tools
	providers   func(a *Agent) (Provider, error)
	events      conversations.Publisher
	cancels     CancelBus
	limiter     toolkits.Limiter
	log         *slog.Logger
	tracer      trace.Tracer
	nodeID      string
	maxSteps    int
	maxDepth    int
	staleAfter  time.Duration
	nodes       Nodes
	nodeTTL     time.Duration
	quietAfter  time.Duration
	writeRetry  time.Duration
	finishRetry time.Duration

	// turns counts the turns this node ended, by status.
	turns *prometheus.CounterVec

	mu       sync.Mutex
	running  map[int64]*activeTurn
	closing  bool
	finished sync.WaitGroup
	// abandoned is set when shutdown stops waiting: retries give up, the store is
	// about to close.
	abandoned atomic.Bool
}

// NewRunner checks d and fills the defaults of what it leaves zero. The Runner starts
// turns at once; Run keeps them alive and must run for as long as the Runner serves.
func NewRunner(d RunnerDeps) (*Runner, error) {
	var missing []string
	for name, ok := range map[string]bool{
		"Store": d.Store != nil, "Agents": d.Agents != nil, "Catalogue": d.Catalogue != nil,
		"Tools": d.Tools != nil, "Providers": d.Providers != nil,
		"Events": d.Events != nil, "Cancels": d.Cancels != nil, "Log": d.Log != nil, "NodeID": d.NodeID != "",
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("agents.NewRunner: missing %s", strings.Join(missing, ", "))
	}
	r := &Runner{
		store: d.Store, agents: d.Agents, catalogue: d.Catalogue, tools: d.Tools,
		providers: d.Providers, events: d.Events, cancels: d.Cancels, limiter: d.Limiter,
		log: d.Log, tracer: cmp.Or[trace.Tracer](d.Tracer, noop.Tracer{}), nodeID: d.NodeID, nodes: d.Nodes,
		maxSteps: cmp.Or(d.MaxSteps, 12), maxDepth: cmp.Or(d.MaxDepth, 3),
		staleAfter: positive(d.StaleAfter, 30*time.Second), nodeTTL: positive(d.NodeTTL, 3*time.Second),
		writeRetry: positive(d.WriteRetry, 15*time.Second), finishRetry: positive(d.FinishRetry, 10*time.Minute),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandchat_turns_total", Help: "Assistant turns ended on this node, by status: completed, failed, cancelled.",
		}, []string{"status"}),
	}
	r.quietAfter = min(positive(d.QuietAfter, r.nodeTTL+time.Second), r.staleAfter)
	return r, nil
}

// Collectors are the turn runner's metrics; main registers them.
func (r *Runner) Collectors() []prometheus.Collector { return []prometheus.Collector{r.turns} }

func positive(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

type activeTurn struct {
	convID int64
	cancel context.CancelCauseFunc
}

var (
	errCancelled = errors.New("cancelled by the user")
	errShutdown  = &sandchat.ShutdownError{Reason: "the server shut down during the turn"}
	errFenced    = errors.New("the turn was ended elsewhere while this server was not answering")
)

// Started is the answer to a new message.
type Started struct {
	Message conversations.Message `json:"message"`
	TurnID  int64                 `json:"turn_id"`
}

// MaxMessageBytes bounds a user message.
const MaxMessageBytes = 256 << 10

// Start stores the user's message and runs the turn in the background.
func (r *Runner) Start(ctx context.Context, convID int64, content string) (Started, error) {
	if err := checkMessage(content); err != nil {
		return Started{}, err
	}
	r.mu.Lock()
	closing := r.closing
	r.mu.Unlock()
	if closing {
		return Started{}, sandchat.Errorf(sandchat.EUNAVAILABLE, "The server is shutting down; send the message again.")
	}
	if r.limiter != nil {
		if err := r.limiter.Allow(ctx, "messages"); err != nil {
			return Started{}, err
		}
	}
	owner := ownerToken()
	turn, msg, evs, err := r.store.StartTurn(ctx, convID, r.nodeID, owner, content)
	if err != nil {
		return Started{}, err
	}
	r.launch(ctx, &turnRun{r: r, convID: convID, turnID: turn.ID, fence: conversations.Fence{TurnID: turn.ID, Owner: owner}}, evs)
	return Started{Message: msg, TurnID: turn.ID}, nil
}

// checkMessage refuses what no user message may be: blank, too long, or not UTF-8.
func checkMessage(content string) error {
	if strings.TrimSpace(content) == "" {
		return sandchat.Errorf(sandchat.EINVALID, "content is required.")
	}
	if len(content) > MaxMessageBytes || !utf8.ValidString(content) {
		return sandchat.Errorf(sandchat.ETOOLARGE, "A message must be valid UTF-8 of at most %d KiB.", MaxMessageBytes>>10)
	}
	return nil
}

// Retried is the answer to a request to answer a message again.
type Retried struct {
	TurnID int64 `json:"turn_id"`
}

// Retry answers the conversation's latest user message again, in a new turn, with the
// tools as they are now: what a user asks for after switching on a tool the first
// answer lacked. The new answer is the message's current version; the earlier one stays
// as a version to switch back to (SetAnswer), which models see only when it is current.
// With content, its author edits the message first and the turn answers the new text
// (edit and resend); it is checked as a new message is.
func (r *Runner) Retry(ctx context.Context, convID, messageID int64, content *string) (Retried, error) {
	if content != nil {
		if err := checkMessage(*content); err != nil {
			return Retried{}, err
		}
	}
	r.mu.Lock()
	closing := r.closing
	r.mu.Unlock()
	if closing {
		return Retried{}, sandchat.Errorf(sandchat.EUNAVAILABLE, "The server is shutting down; ask again.")
	}
	if r.limiter != nil {
		if err := r.limiter.Allow(ctx, "messages"); err != nil {
			return Retried{}, err
		}
	}
	owner := ownerToken()
	turn, evs, err := r.store.RetryTurn(ctx, convID, messageID, r.nodeID, owner, content)
	if err != nil {
		return Retried{}, err
	}
	r.launch(ctx, &turnRun{r: r, convID: convID, turnID: turn.ID, fence: conversations.Fence{TurnID: turn.ID, Owner: owner}, retry: true}, evs)
	return Retried{TurnID: turn.ID}, nil
}

// SetAnswer makes one of a user message's answer versions (the turn that gave it) the
// current one, for every tab of the conversation and for the models of later turns.
func (r *Runner) SetAnswer(ctx context.Context, convID, messageID, turnID int64) (conversations.Message, error) {
	msg, ev, err := r.store.SetAnswer(ctx, convID, messageID, turnID)
	if err != nil {
		return msg, err
	}
	r.publish(ctx, ev)
	return msg, nil
}

// launch publishes the events that started t and runs it in the background, for the
// user in ctx.
func (r *Runner) launch(ctx context.Context, t *turnRun, evs []conversations.Event) {
	for _, ev := range evs {
		r.publish(ctx, ev)
	}
	// The turn outlives its request, and keeps its id and its trace: its log lines and
	// spans are the request's.
	bg := trace.ContextWithSpanContext(sandchat.WithRequestID(context.Background(), sandchat.RequestID(ctx)), trace.SpanContextFromContext(ctx))
	tctx, cancel := context.WithCancelCause(sandchat.WithUser(bg, sandchat.UserFromContext(ctx)))
	t.cancel = cancel
	r.mu.Lock()
	if r.running == nil {
		r.running = map[int64]*activeTurn{}
	}
	r.running[t.turnID] = &activeTurn{convID: t.convID, cancel: cancel}
	r.finished.Add(1)
	r.mu.Unlock()
	go r.run(tctx, t)
}

// Cancel stops a running turn on whichever node runs it.
func (r *Runner) Cancel(ctx context.Context, convID, turnID int64) error {
	conv, err := r.store.FindConversationByID(ctx, convID)
	if err != nil {
		return err
	}
	if !sandchat.CanEdit(conv.Role) {
		return sandchat.Errorf(sandchat.EFORBIDDEN, "Your role (%s) does not allow cancelling turns here.", conv.Role)
	}
	t, err := r.store.Turn(ctx, convID, turnID)
	if err != nil {
		return err
	}
	if t.Status != conversations.TurnRunning {
		return sandchat.Errorf(sandchat.ECONFLICT, "The turn already ended (%s).", t.Status)
	}
	if running, err := r.store.RequestCancel(ctx, convID, turnID); err != nil {
		return err
	} else if !running {
		return sandchat.Errorf(sandchat.ECONFLICT, "The turn already ended.")
	}
	if r.CancelLocal(turnID) {
		return nil
	}
	// The fast way to the node running the turn. Pub/sub drops what is published while
	// that node's subscription is away; its heartbeat then finds the request.
	pctx, cancel := context.WithTimeout(ctx, cancelPublishTimeout)
	defer cancel()
	if err := r.cancels.PublishCancel(pctx, turnID); err != nil {
		r.log.WarnContext(ctx, "publish cancel; the runner's heartbeat will see it", "turn_id", turnID, "err", err)
	}
	return nil
}

// cancelPublishTimeout bounds the fast path of a cancel when Redis is unreachable: the
// request is recorded already.
const cancelPublishTimeout = 500 * time.Millisecond

// CancelLocal cancels the turn if this node runs it.
func (r *Runner) CancelLocal(turnID int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.running[turnID]
	if t == nil {
		return false
	}
	t.cancel(errCancelled)
	return true
}

func (r *Runner) publish(ctx context.Context, ev conversations.Event) {
	if err := r.events.PublishConversation(context.WithoutCancel(ctx), ev); err != nil {
		r.log.WarnContext(ctx, "publish event", "type", ev.Type, "conversation_id", ev.ConversationID, "err", err)
	}
}

// emit stores and publishes an event of the turn; a turn whose events cannot be stored
// fails.
func (t *turnRun) emit(ctx context.Context, typ string, path []string, data any) error {
	var ev conversations.Event
	err := t.write(ctx, func(wctx context.Context) (err error) {
		ev, err = t.r.store.Emit(wctx, t.fence, t.convID, typ, path, data)
		return err
	})
	if err != nil {
		return err
	}
	t.r.publish(ctx, ev)
	return nil
}

// write runs one fenced write of the turn. While Postgres is away it is retried for
// WriteRetry, so a short outage costs a pause rather than the turn; a fenced write
// stops the whole turn, whose work now belongs to nobody.
func (t *turnRun) write(ctx context.Context, fn func(ctx context.Context) error) error {
	wctx := context.WithoutCancel(ctx)
	err := t.r.backoff(t.r.writeRetry).Retry(ctx, func() error { return fn(wctx) }, t.r.worthRetrying)
	if errors.Is(err, conversations.ErrFenced) {
		t.cancel(errFenced)
	}
	return err
}

// backoff is how the runner's writes wait for Postgres to come back, for at most d.
func (r *Runner) backoff(d time.Duration) sandchat.Backoff {
	return sandchat.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, For: d}
}

// worthRetrying: Postgres is away and shutdown has not given up on the turn.
func (r *Runner) worthRetrying(err error) bool {
	return sandchat.IsUnavailable(err) && !r.abandoned.Load()
}

func (r *Runner) run(ctx context.Context, t *turnRun) {
	defer r.finished.Done()
	ctx, span := r.tracer.Start(ctx, "turn", trace.WithAttributes(attribute.Int64("sandchat.turn_id", t.turnID),
		attribute.Int64("sandchat.conversation_id", t.convID)))
	status, errText := conversations.TurnCompleted, ""
	defer func() {
		defer span.End()
		if p := recover(); p != nil {
			r.log.ErrorContext(ctx, "turn panicked", "turn_id", t.turnID, "panic", p)
			status, errText = conversations.TurnFailed, "internal error"
		}
		// The turn stays in running (and renewed) until its end is stored, so no other
		// node fails it with a wrong reason meanwhile.
		if status != "" {
			r.turns.WithLabelValues(status).Inc()
			span.SetAttributes(attribute.String("sandchat.turn_status", status))
			if status == conversations.TurnFailed {
				span.SetStatus(codes.Error, errText)
			}
			r.finish(ctx, t, status, errText)
		}
		r.mu.Lock()
		delete(r.running, t.turnID)
		r.mu.Unlock()
	}()
	err := t.turn(ctx)
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errFenced) || errors.Is(err, conversations.ErrFenced):
		r.log.WarnContext(ctx, "turn ended elsewhere; this runner stopped", "turn_id", t.turnID)
		status = ""
	case err == nil:
	case errors.Is(cause, errCancelled):
		status, errText = conversations.TurnCancelled, errCancelled.Error()
	case errors.Is(cause, errShutdown):
		status, errText = conversations.TurnFailed, errShutdown.Error()
	default:
		status, errText = conversations.TurnFailed, sandchat.ErrorMessage(err)
		if sandchat.ErrorCode(err) == sandchat.EINTERNAL {
			r.log.ErrorContext(ctx, "turn failed", "turn_id", t.turnID, "err", err)
		}
	}
}

// finish stores the end of the turn, retrying while Postgres is away: a turn must not
// stay running (and its conversation blocked) because of an outage it outlived.
func (r *Runner) finish(ctx context.Context, t *turnRun, status, errText string) {
	ctx = context.WithoutCancel(ctx)
	var ev *conversations.Event
	err := r.backoff(r.finishRetry).Retry(ctx, func() (err error) {
		ev, err = r.store.FinishTurn(ctx, t.fence, t.convID, status, errText, t.used())
		return err
	}, r.worthRetrying)
	switch {
	case err == nil:
		r.publish(ctx, *ev)
	case errors.Is(err, conversations.ErrFenced):
		r.log.WarnContext(ctx, "turn ended elsewhere before this runner could end it", "turn_id", t.turnID)
	default:
		r.log.ErrorContext(ctx, "finish turn", "turn_id", t.turnID, "err", err)
	}
}

func (t *turnRun) turn(ctx context.Context) error {
	r, convID := t.r, t.convID
	ts, err := r.store.ToolSettings(ctx, convID)
	if err != nil {
		return err
	}
	agent := &Agent{Name: "assistant", InternalTools: map[string]bool{}}
	if id := ts.Conversation.AgentID; id != nil {
		if agent, err = r.agents.LoadAgent(ctx, *id); err != nil {
			return err
		}
	}
	history, err := r.store.History(ctx, convID)
	if err != nil {
		return err
	}
	msgs := modelContext(history)
	if t.retry {
		msgs = untilLastUser(msgs)
	}
	states := r.catalogue.Resolve(ts.Overrides, ts.Agent)
	_, err = t.agentLoop(ctx, agent, []string{agent.Name}, msgs, toolkits.Enabled(states), toolkits.OffReasons(states, agent.Name, false), 0)
	return err
}

func ownerToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// turnRun is one turn's state shared by the agents that take part in it.
type turnRun struct {
	r      *Runner
	convID int64
	turnID int64
	fence  conversations.Fence
	cancel context.CancelCauseFunc
	// retry: the turn answers the latest user message again (Runner.Retry).
	retry bool

	mu    sync.Mutex
	usage *Usage // the sum of what its model calls reported; guarded by mu
}

// addUsage adds what one model call reported to the turn's tokens.
func (t *turnRun) addUsage(u *Usage) {
	if u == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.usage == nil {
		t.usage = &Usage{}
	}
	t.usage.PromptTokens += u.PromptTokens
	t.usage.CompletionTokens += u.CompletionTokens
}

// used is the turn's tokens so far; nil when no model reported any.
func (t *turnRun) used() *Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.usage == nil {
		return nil
	}
	u := *t.usage
	return &u
}

// agentLoop lets one agent answer: call the model, run the tools it asks for, feed the
// results back, until it answers without tools. It returns the final text.
func (t *turnRun) agentLoop(ctx context.Context, agent *Agent, path []string, msgs []ChatMessage, enabled map[string]bool, off map[string]string, depth int) (string, error) {
	r := t.r
	provider, err := r.providers(agent)
	if err != nil {
		return "", err
	}
	children, err := t.children(ctx, agent, enabled)
	if err != nil {
		return "", err
	}
	var agentID *int64
	if agent.ID != 0 {
		agentID = &agent.ID
	}
	at := &agentTurn{t: t, agent: agent, path: path, depth: depth}
	var swarm toolkits.Swarm
	var kids []toolkits.Child
	if len(children) > 0 && depth < r.maxDepth {
		at.children, swarm = children, at
		for _, c := range children {
			kids = append(kids, toolkits.Child{Name: c.Name, Description: c.Description})
		}
	}
	box := r.tools.Toolbox(toolkits.Caller{ConversationID: t.convID, TurnID: t.turnID, AgentID: agentID, AgentName: agent.Name, Preload: agent.Preload},
		enabled, at, kids, swarm)
	tools := box.Specs(ctx)
	for step := 0; step < r.maxSteps; step++ {
		req := CompletionRequest{Model: agent.Model, Tools: tools, Off: off}
		if system := systemPrompt(agent.SystemPrompt, off); system != "" {
			req.Messages = append(req.Messages, ChatMessage{Role: RoleSystem, Content: system})
		}
		req.Messages = append(req.Messages, msgs...)
		deltas := t.stream(ctx, conversations.EventMessageDelta, path, map[string]any{"turn_id": t.turnID, "step": step})
		comp, err := provider.Complete(ctx, req, deltas.add)
		t.addUsage(comp.Usage)
		if ferr := deltas.Flush(); ferr != nil && err == nil {
			err = ferr
		}
		if err != nil {
			if ctx.Err() != nil {
				return "", context.Cause(ctx)
			}
			return "", err
		}
		calls, _ := json.Marshal(comp.ToolCalls)
		if len(comp.ToolCalls) == 0 {
			calls = nil
		}
		var ev conversations.Event
		err = t.write(ctx, func(wctx context.Context) (err error) {
			_, ev, err = r.store.AddMessage(wctx, t.fence, conversations.Message{
				ConversationID: t.convID, Role: RoleAssistant, AgentID: agentID, AgentPath: path,
				Content: comp.Content, ToolCalls: calls,
			})
			return err
		})
		if err != nil {
			return "", err
		}
		r.publish(ctx, ev)
		msgs = append(msgs, ChatMessage{Role: RoleAssistant, Content: comp.Content, ToolCalls: comp.ToolCalls})
		if len(comp.ToolCalls) == 0 {
			return comp.Content, nil
		}
		// The context a child sees: the conversation so far, without this pending call.
		at.before = msgs[:len(msgs)-1]
		for _, call := range comp.ToolCalls {
			content := t.call(ctx, box, call)
			if err := ctx.Err(); err != nil {
				return "", context.Cause(ctx)
			}
			var ev conversations.Event
			err := t.write(ctx, func(wctx context.Context) (err error) {
				_, ev, err = r.store.AddMessage(wctx, t.fence, conversations.Message{
					ConversationID: t.convID, Role: RoleTool, AgentID: agentID, AgentPath: path,
					Content: content, ToolCallID: call.ID,
				})
				return err
			})
			if err != nil {
				return "", err
			}
			r.publish(ctx, ev)
			msgs = append(msgs, ChatMessage{Role: RoleTool, Content: content, ToolCallID: call.ID})
		}
	}
	return "", sandchat.Errorf(sandchat.EUNAVAILABLE, "The agent %s did not finish within %d steps.", agent.Name, r.maxSteps)
}

// call runs one tool call of the model, in a span of its own.
func (t *turnRun) call(ctx context.Context, box *toolkits.Toolbox, call ToolCall) string {
	ctx, span := t.r.tracer.Start(ctx, "tool "+call.Name, trace.WithAttributes(attribute.String("sandchat.tool", call.Name)))
	defer span.End()
	return box.Call(ctx, call)
}

// systemPrompt is the agent's own prompt followed by what the model must know of the
// tools that are off in this turn: a prompt written for an agent with the sandbox on
// ("you run Python") must not make a model without the tool claim it.
func systemPrompt(own string, off map[string]string) string {
	note := toolkits.OffNote(off)
	switch {
	case own == "":
		return note
	case note == "":
		return own
	}
	return own + "\n\n" + note
}

// children loads the agent's children when swarm mode is on for it.
func (t *turnRun) children(ctx context.Context, agent *Agent, enabled map[string]bool) ([]*Agent, error) {
	if !enabled[toolkits.SwarmMode] {
		return nil, nil
	}
	var out []*Agent
	for _, id := range agent.Children {
		c, err := t.r.agents.LoadAgent(ctx, id)
		if sandchat.ErrorCode(err) == sandchat.ENOTFOUND {
			continue
		} else if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// agentTurn is one agent's place in a turn: the toolbox reports its runs through it
// (toolkits.Turn), and its children answer through it (toolkits.Swarm).
type agentTurn struct {
	t        *turnRun
	agent    *Agent
	path     []string
	depth    int
	children []*Agent
	before   []ChatMessage // what a child sees: the conversation up to the pending call
}

func (a *agentTurn) Emit(ctx context.Context, typ string, data map[string]any) error {
	return a.t.emit(ctx, typ, a.path, data)
}

func (a *agentTurn) Stream(ctx context.Context, typ string, base map[string]any) toolkits.Stream {
	return a.t.stream(ctx, typ, a.path, base)
}

func (a *agentTurn) Vetoed(ctx context.Context, toolID string) bool {
	ts, err := a.t.r.store.ToolSettings(ctx, a.t.convID)
	if err != nil {
		return false // the turn's own resolution stands; the run itself will fail if the store is down
	}
	on, set := ts.Overrides[toolID]
	return set && !on
}

// Delegate runs the named child's answer as a nested agent loop, recorded as a handoff.
func (a *agentTurn) Delegate(ctx context.Context, name, task string) (status, answer string) {
	t, r := a.t, a.t.r
	i := slices.IndexFunc(a.children, func(c *Agent) bool { return c.Name == name })
	if i < 0 {
		return toolkits.StatusRefused, fmt.Sprintf("No child agent called %q.", name)
	}
	child := a.children[i]
	childPath := append(slices.Clone(a.path), child.Name)
	var id int64
	var ev conversations.Event
	err := t.write(ctx, func(wctx context.Context) (err error) {
		id, ev, err = r.store.StartHandoff(wctx, t.fence, t.convID, a.agent.ID, child.ID, childPath, task)
		return err
	})
	if err != nil {
		return toolkits.StatusRefused, "The handoff could not be recorded: " + sandchat.ErrorMessage(err)
	}
	r.publish(ctx, ev)
	// A child has its own settings, under the user's veto: read now, so a switch flipped
	// off during the turn stops the children handed work after it.
	status = conversations.HandoffCompleted
	ts, err := r.store.ToolSettings(ctx, t.convID)
	if err == nil {
		states := r.catalogue.ResolveChild(ts.Overrides, child.InternalTools)
		msgs := append(slices.Clone(a.before), ChatMessage{Role: RoleUser, Content: task})
		answer, err = t.agentLoop(ctx, child, childPath, msgs, toolkits.Enabled(states), toolkits.OffReasons(states, child.Name, true), a.depth+1)
	}
	if err != nil {
		status, answer = conversations.HandoffFailed, sandchat.ErrorMessage(err)
	}
	if ferr := t.write(ctx, func(wctx context.Context) (err error) {
		ev, err = r.store.FinishHandoff(wctx, t.fence, t.convID, id, childPath, status, answer)
		return err
	}); ferr == nil {
		r.publish(ctx, ev)
	}
	return status, answer
}
