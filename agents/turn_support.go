package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/toolkits"
)

// streamer turns many small chunks (tokens, output lines) into few events: it flushes
// when enough text waited or enough time passed, and before anything else is said.
type streamer struct {
	t    *turnRun
	ctx  context.Context
	typ  string
	path []string
	base map[string]any

	mu     sync.Mutex
	stream string
	buf    strings.Builder
	last   time.Time
	err    error
	sent   int  // bytes emitted so far
	capped bool // the cap was reached and said so
}

const (
	flushBytes = 512
	flushEvery = 50 * time.Millisecond
	// streamCap bounds what one stream (a run's output, a model's answer) sends as
	// events: past it, clients get a marker and the full text over REST, so no frame
	// and no socket queue is flooded by one chatty program.
	streamCap    = 64 << 10
	eventTextMax = 16 << 10
)

func (t *turnRun) stream(ctx context.Context, typ string, path []string, base map[string]any) *streamer {
	return &streamer{t: t, ctx: ctx, typ: typ, path: path, base: base, last: time.Now()}
}

func (s *streamer) add(text string) { s.addStream("", text) }

func (s *streamer) addStream(stream, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if stream != s.stream && s.buf.Len() > 0 {
		s.flushLocked()
	}
	s.stream = stream
	if s.sent+s.buf.Len()+len(text) > streamCap {
		if s.capped {
			return
		}
		s.capped = true
		text = "\n…[live output truncated; the full output is in the result]…\n"
	}
	// One event carries at most eventTextMax: a program printing a megabyte at once
	// still makes small frames.
	for len(text) > 0 {
		n := min(len(text), eventTextMax-s.buf.Len())
		for n < len(text) && n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		if n <= 0 && s.buf.Len() > 0 {
			s.flushLocked()
			continue
		} else if n <= 0 {
			n = min(len(text), eventTextMax) // not UTF-8 here: cut anywhere
		}
		s.buf.WriteString(text[:n])
		text = text[n:]
		if s.buf.Len() >= flushBytes || time.Since(s.last) >= flushEvery {
			s.flushLocked()
		}
	}
}

func (s *streamer) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked()
	return s.err
}

func (s *streamer) flushLocked() {
	s.last = time.Now()
	if s.buf.Len() == 0 || s.err != nil {
		return
	}
	data := merge(s.base, map[string]any{"text": s.buf.String()})
	if s.stream != "" {
		data["stream"] = s.stream
	}
	s.sent += s.buf.Len()
	s.buf.Reset()
	s.err = s.t.emit(s.ctx, s.typ, s.path, data)
}

// toolResult is the compact form of a tool's outcome given to the model.
type toolResult struct {
	Status    string   `json:"status"`
	Message   string   `json:"message,omitempty"`
	Stdout    string   `json:"stdout,omitempty"`
	Stderr    string   `json:"stderr,omitempty"`
	Result    *string  `json:"result,omitempty"`
	Error     *errInfo `json:"error,omitempty"`
	Artifacts []string `json:"artifacts,omitempty"`
	// Displays says what the user was shown (rich items, images), never the bytes.
	Displays []string `json:"displays,omitempty"`
	// DataFiles lists the conversation's files under /data.
	DataFiles []string `json:"data_files,omitempty"`
	Session   string   `json:"session,omitempty"`
	Agent     string   `json:"agent,omitempty"`
	Answer    string   `json:"answer,omitempty"`
}

type errInfo struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
}

// What of a run's output reaches the model: its head and its tail, which is where
// errors and results are; the user still sees all of it in tool.completed.
const (
	modelHead = 6 << 10
	modelTail = 2 << 10
)

func clip(s string) string {
	if len(s) <= modelHead+modelTail {
		return s
	}
	head, tail := cutAt(s, modelHead), s[cutAt(s, len(s)-modelTail):]
	return s[:head] + fmt.Sprintf("\n…[%d of %d bytes omitted: the first %d and the last %d are shown]…\n",
		len(s)-head-len(tail), len(s), head, len(tail)) + tail
}

// cutAt moves i back to the start of a UTF-8 sequence.
func cutAt(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// tracebackMax bounds the traceback the model gets: the end, where the failing line
// and the exception are, matters most.
const tracebackMax = 4 << 10

func clipTraceback(tb string) string {
	if len(tb) <= tracebackMax {
		return tb
	}
	i := cutAt(tb, len(tb)-tracebackMax)
	if j := strings.Index(tb[i:], "\n"); j >= 0 {
		i += j + 1
	}
	return fmt.Sprintf("…[%d bytes of earlier frames omitted]…\n", i) + tb[i:]
}

// previewMax bounds each text preview of a display item for the model.
const previewMax = 600

func preview(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= previewMax {
		return s
	}
	return s[:cutAt(s, previewMax)] + fmt.Sprintf("…[%d bytes]", len(s))
}

// describeDisplay is what the model learns of an item shown to the user.
func describeDisplay(d sandbox.Display) string {
	what := "shown to the user"
	if d.Kind == "result" {
		what = "the result was shown to the user"
	}
	switch {
	case d.Image != nil:
		return fmt.Sprintf("image %s (%s, %d×%d)", what, d.Image.Name, d.Image.Width, d.Image.Height)
	case d.HTML != "":
		return fmt.Sprintf("HTML %s; its text form: %s", what, preview(d.Text))
	case d.Markdown != "":
		return fmt.Sprintf("Markdown %s: %s", what, preview(d.Markdown))
	case d.SVG != "":
		return fmt.Sprintf("SVG image %s (%d bytes); its text form: %s", what, len(d.SVG), preview(d.Text))
	case len(d.JSON) > 0:
		return fmt.Sprintf("JSON %s: %s", what, preview(string(d.JSON)))
	case d.LaTeX != "":
		return fmt.Sprintf("LaTeX %s: %s", what, preview(d.LaTeX))
	}
	return fmt.Sprintf("text %s: %s", what, preview(d.Text))
}

// displayData is a display item as a tool.display event: its text parts (bounded) and
// its image's name and size; the image's file id comes with tool.completed.
func displayData(index int, d sandbox.Display) map[string]any {
	const partMax = 256 << 10
	data := map[string]any{"index": index, "kind": d.Kind, "text": truncate(d.Text, eventTextMax)}
	for k, v := range map[string]string{"html": d.HTML, "markdown": d.Markdown, "svg": d.SVG, "latex": d.LaTeX} {
		if v == "" {
			continue
		}
		if len(v) > partMax {
			// Cut markup is broken markup: the whole item is in the run's result.
			data["truncated"] = true
			continue
		}
		data[k] = v
	}
	if len(d.JSON) > 0 && len(d.JSON) <= partMax {
		data["json"] = d.JSON
	}
	if d.Image != nil {
		data["image"] = d.Image
	}
	return data
}

// eventDisplays is a run's display items for tool.completed, within a total budget:
// past it, items keep their text and image and say they were truncated.
func eventDisplays(ds []sandbox.Display) []map[string]any {
	const budget = 2 << 20
	out := make([]map[string]any, 0, len(ds))
	used := 0
	for i, d := range ds {
		item := displayData(i, d)
		n := len(d.HTML) + len(d.Markdown) + len(d.SVG) + len(d.LaTeX) + len(d.JSON)
		if used+n > budget {
			for _, k := range []string{"html", "markdown", "svg", "latex", "json"} {
				if _, ok := item[k]; ok {
					delete(item, k)
					item["truncated"] = true
				}
			}
		} else {
			used += n
		}
		out = append(out, item)
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:cutAt(s, n)] + "…"
}

// eventOutputMax bounds each text of a run in its tool.completed event; the event then
// says so and where the whole run is.
const eventOutputMax = 16 << 10

func completedData(run toolkits.Run) map[string]any {
	truncated := false
	cut := func(s string) string {
		if len(s) <= eventOutputMax {
			return s
		}
		truncated = true
		i := eventOutputMax
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		return s[:i] + "\n…[truncated]"
	}
	d := map[string]any{
		"execution_id": run.ID, "status": run.Status, "stdout": cut(run.Stdout), "stderr": cut(run.Stderr),
		"artifacts": run.Artifacts, "execution_ms": run.ExecutionMS, "session": run.Session,
		"displays": eventDisplays(run.Displays),
	}
	if run.Result.Result != nil {
		v := cut(*run.Result.Result)
		d["result"] = &v
	} else {
		d["result"] = nil
	}
	if run.Error != nil {
		e := *run.Error
		e.Message, e.Traceback = cut(e.Message), cut(e.Traceback)
		d["error"] = e
	}
	if run.Notice != "" {
		d["notice"] = run.Notice
	}
	if truncated {
		d["truncated"] = true
	}
	return d
}

// maxModelDisplays bounds the display items and /data files listed for the model.
const maxModelDisplays = 20

func compactRun(run toolkits.Run) string {
	r := toolResult{Status: run.Status, Stdout: clip(run.Stdout), Stderr: clip(run.Stderr)}
	if run.Result.Result != nil {
		v := clip(*run.Result.Result)
		r.Result = &v
	}
	if run.Error != nil {
		r.Error = &errInfo{Type: run.Error.Type, Message: clip(run.Error.Message), Traceback: clipTraceback(run.Error.Traceback)}
	}
	for _, a := range run.Artifacts {
		r.Artifacts = append(r.Artifacts, fmt.Sprintf("%s (%d bytes)", a.Name, a.Size))
	}
	for i, d := range run.Displays {
		if i == maxModelDisplays {
			r.Displays = append(r.Displays, fmt.Sprintf("… and %d more items", len(run.Displays)-i))
			break
		}
		r.Displays = append(r.Displays, describeDisplay(d))
	}
	for i, f := range run.DataFiles {
		if i == maxModelDisplays {
			r.DataFiles = append(r.DataFiles, fmt.Sprintf("… and %d more files", len(run.DataFiles)-i))
			break
		}
		r.DataFiles = append(r.DataFiles, f)
	}
	if run.Notice != "" {
		r.Message = run.Notice
	}
	switch {
	case run.Session.RestoredFrom == "replay":
		r.Session = "The session's saved state was lost and was rebuilt by replaying its earlier successful runs."
	case run.Session.Expired:
		r.Session = "The previous session expired and this run started fresh: re-run earlier setup (imports, variables) if needed."
	case run.Session.RestoredFrom == "fresh" && run.Session.Version <= 1:
		r.Session = "New session."
	}
	raw, _ := json.Marshal(r)
	return string(raw)
}

// modelContext turns stored messages into the model's context: the primary agent's
// exchange only (a child's inner steps reach the parent as its tool result), with tool
// calls and results kept in pairs, as chat APIs require.
func modelContext(history []conversations.Message) []ChatMessage {
	answered := map[string]bool{}
	for _, m := range history {
		if m.Role == RoleTool && len(m.AgentPath) <= 1 {
			answered[m.ToolCallID] = true
		}
	}
	var out []ChatMessage
	asked := map[string]bool{}
	for _, m := range history {
		if len(m.AgentPath) > 1 {
			continue
		}
		switch m.Role {
		case RoleUser:
			out = append(out, ChatMessage{Role: RoleUser, Content: m.Content})
		case RoleAssistant:
			cm := ChatMessage{Role: RoleAssistant, Content: m.Content}
			var calls []ToolCall
			_ = json.Unmarshal(m.ToolCalls, &calls)
			for _, c := range calls {
				// A call cut off by a crash or cancel has no result: drop it.
				if answered[c.ID] {
					cm.ToolCalls = append(cm.ToolCalls, c)
					asked[c.ID] = true
				}
			}
			if cm.Content == "" && len(cm.ToolCalls) == 0 {
				continue
			}
			out = append(out, cm)
		case RoleTool:
			if asked[m.ToolCallID] {
				out = append(out, ChatMessage{Role: RoleTool, Content: m.Content, ToolCallID: m.ToolCallID})
			}
		}
	}
	return out
}

// Run keeps this node's running turns alive in the store, stops those it lost, and fails
// the turns of nodes that died, until ctx ends.
func (r *Runner) Run(ctx context.Context) {
	beat := min(time.Second, r.staleAfter/3, r.nodeTTL/3)
	heartbeat := time.NewTicker(beat)
	defer heartbeat.Stop()
	r.beat(ctx)
	r.sweep(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			r.beat(ctx)
			r.sweep(ctx)
		}
	}
}

// beat renews this node's liveness key and its turns; a turn the store says this node
// no longer runs is cancelled at once, so its code is interrupted.
func (r *Runner) beat(ctx context.Context) {
	if r.nodes != nil {
		if err := r.nodes.Beat(ctx, r.nodeID, r.nodeTTL); err != nil && ctx.Err() == nil {
			r.log.Debug("node heartbeat", "err", err)
		}
	}
	r.mu.Lock()
	ids := make([]int64, 0, len(r.running))
	for id := range r.running {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	lost, err := r.store.Heartbeat(ctx, r.nodeID, ids)
	if err != nil && ctx.Err() == nil {
		r.log.Warn("turn heartbeat", "err", err)
	}
	r.mu.Lock()
	for _, id := range lost {
		if t := r.running[id]; t != nil {
			r.log.Warn("turn ended elsewhere; stopping it here", "turn_id", id)
			t.cancel(errFenced)
		}
	}
	r.mu.Unlock()
}

func (r *Runner) sweep(ctx context.Context) {
	var dead []string
	if r.nodes != nil {
		quiet, err := r.store.QuietNodes(ctx, r.quietAfter)
		if err == nil && len(quiet) > 0 {
			// Without Redis nobody is known dead: only the stale limit applies.
			if alive, err := r.nodes.Alive(ctx, quiet); err == nil {
				for _, n := range quiet {
					if !alive[n] && n != r.nodeID {
						dead = append(dead, n)
					}
				}
			}
		}
	}
	evs, err := r.store.FailStaleTurns(ctx, r.staleAfter, r.quietAfter, dead,
		"the server running this turn stopped (crash, kill or restart); send the message again")
	if err != nil && ctx.Err() == nil {
		r.log.Warn("fail stale turns", "err", err)
	}
	for _, ev := range evs {
		r.log.Warn("failed a turn left running by a stopped server", "conversation_id", ev.ConversationID)
		r.publish(ctx, ev)
	}
}

// Shutdown stops taking new turns, lets running ones finish until ctx ends, then
// cancels the rest, which are marked failed.
func (r *Runner) Shutdown(ctx context.Context) {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.finished.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	r.mu.Lock()
	for _, t := range r.running {
		t.cancel(errShutdown)
	}
	r.mu.Unlock()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		r.abandoned.Store(true)
	}
}
