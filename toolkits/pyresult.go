package toolkits

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sandchat/sandchat"
)

// eventTextMax bounds the text of one display item in its tool.display event.
const eventTextMax = 16 << 10

// StatusRefused is the ToolResult.Status of a call that was not run (Message says why),
// and what Swarm.Delegate answers for a handoff that did not start; a handoff that did
// ends as conversations.HandoffCompleted or HandoffFailed.
const StatusRefused = "refused"

// ToolResult is the compact form of a tool's outcome given to the model.
type ToolResult struct {
	Status    string     `json:"status"`
	Message   string     `json:"message,omitempty"`
	Stdout    string     `json:"stdout,omitempty"`
	Stderr    string     `json:"stderr,omitempty"`
	Result    *string    `json:"result,omitempty"`
	Error     *ErrorInfo `json:"error,omitempty"`
	Artifacts []string   `json:"artifacts,omitempty"`
	// Displays says what the user was shown (rich items, images), never the bytes.
	Displays []string `json:"displays,omitempty"`
	// DataFiles lists the conversation's files under /data.
	DataFiles []string `json:"data_files,omitempty"`
	Session   string   `json:"session,omitempty"`
	Agent     string   `json:"agent,omitempty"`
	Answer    string   `json:"answer,omitempty"`
	// Summary is a data analysis result in words (DataResult).
	Summary string `json:"summary,omitempty"`
}

// ErrorInfo is the error of a failed run as the model sees it.
type ErrorInfo struct {
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
	head, tail := len(sandchat.TruncateUTF8(s, modelHead, "")), s[len(sandchat.TruncateUTF8(s, len(s)-modelTail, "")):]
	return s[:head] + fmt.Sprintf("\n…[%d of %d bytes omitted: the first %d and the last %d are shown]…\n",
		len(s)-head-len(tail), len(s), head, len(tail)) + tail
}

// tracebackMax bounds the traceback the model gets: the end, where the failing line
// and the exception are, matters most.
const tracebackMax = 4 << 10

func clipTraceback(tb string) string {
	if len(tb) <= tracebackMax {
		return tb
	}
	i := len(sandchat.TruncateUTF8(tb, len(tb)-tracebackMax, ""))
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
	return sandchat.TruncateUTF8(s, previewMax, fmt.Sprintf("…[%d bytes]", len(s)))
}

// describeDisplay is what the model learns of an item shown to the user.
func describeDisplay(d sandchat.Display) string {
	what := "shown to the user"
	if d.Kind == sandchat.DisplayResult {
		what = "the result was shown to the user"
	}
	switch {
	case d.Image != nil:
		return fmt.Sprintf("image %s (%s, %d×%d)", what, d.Image.Name, d.Image.Width, d.Image.Height)
	case len(d.Plotly) > 0:
		return fmt.Sprintf("interactive Plotly chart %s; its text form: %s", what, preview(d.Text))
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
func displayData(index int, d sandchat.Display) map[string]any {
	const partMax = 256 << 10
	data := map[string]any{"index": index, "kind": d.Kind, "text": sandchat.TruncateUTF8(d.Text, eventTextMax, "…")}
	if d.ID != "" {
		data["id"] = d.ID
	}
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
	for k, v := range map[string]json.RawMessage{"json": d.JSON, "plotly": d.Plotly} {
		if len(v) == 0 {
			continue
		}
		if len(v) > partMax {
			data["truncated"] = true
			continue
		}
		data[k] = v
	}
	if d.Image != nil {
		data["image"] = d.Image
	}
	if d.At != nil {
		data["at"] = d.At
	}
	return data
}

// eventDisplays is a run's display items for tool.completed, within a total budget:
// past it, items keep their text and image and say they were truncated.
func eventDisplays(ds []sandchat.Display) []map[string]any {
	const budget = 2 << 20
	out := make([]map[string]any, 0, len(ds))
	used := 0
	for i, d := range ds {
		item := displayData(i, d)
		n := len(d.HTML) + len(d.Markdown) + len(d.SVG) + len(d.LaTeX) + len(d.JSON) + len(d.Plotly)
		if used+n > budget {
			for _, k := range []string{"html", "markdown", "svg", "latex", "json", "plotly"} {
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

// eventOutputMax bounds each text of a run in its tool.completed event; the event then
// says so and where the whole run is.
const eventOutputMax = 16 << 10

func completedData(run Run) map[string]any {
	truncated := false
	cut := func(s string) string {
		if len(s) <= eventOutputMax {
			return s
		}
		truncated = true
		return sandchat.TruncateUTF8(s, eventOutputMax, "\n…[truncated]")
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
	if len(run.Order) > 0 {
		d["order"] = run.Order
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

func compactRun(run Run) string {
	r := ToolResult{Status: run.Status, Stdout: clip(run.Stdout), Stderr: clip(run.Stderr)}
	if run.Result.Result != nil {
		v := clip(*run.Result.Result)
		r.Result = &v
	}
	if run.Error != nil {
		r.Error = &ErrorInfo{Type: run.Error.Type, Message: clip(run.Error.Message), Traceback: clipTraceback(run.Error.Traceback)}
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
	case run.Session.ResetFrom > 0:
		r.Session = "The session's saved state could not run and the session was reset: earlier variables, files and installed packages are lost; re-run earlier setup if needed."
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
