package sandchat

import (
	"encoding/json"
	"time"
)

// RunOutcome is what one run of Python did. The sandbox engine reports it, the
// conversation's record keeps it and the API answers it: one record, so no layer
// copies it into a shape of its own.
type RunOutcome struct {
	Status    string     `json:"status"`
	Stdout    string     `json:"stdout"`
	Stderr    string     `json:"stderr"`
	Result    *string    `json:"result"` // repr of a trailing expression
	Error     *RunError  `json:"error,omitempty"`
	Artifacts []Artifact `json:"artifacts"`
	Displays  []Display  `json:"displays"`
	// Order keeps the order Stdout and Stderr were written in, which each stream whole
	// does not: the points where the output went from one stream to the other, each as
	// the bytes of both written before it. A client cuts the streams there and lays the
	// pieces out in turn (o1, e1, o2). At most MaxOutputOrder points: past them, the rest
	// of each stream shows whole. Runs recorded before it was kept, and runs that wrote
	// one stream only, have none.
	Order       []OutputAt `json:"order,omitempty"`
	ExecutionMS int64      `json:"execution_ms"`
}

// MaxOutputOrder bounds RunOutcome.Order: a program that alternates the streams on
// every line keeps the order of its first thousand switches.
const MaxOutputOrder = 1000

// Statuses of a RunOutcome. The engine answers the first three; a run's record says
// StatusFailed when the engine could not complete the run.
const (
	StatusSuccess = "success"
	StatusError   = "error" // the code raised: RunOutcome.Error says what
	StatusTimeout = "timeout"
	StatusFailed  = "failed"
)

// RunError is the exception a run raised (or why the engine stopped it, or why it could
// not complete).
type RunError struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
}

// Artifact is a file created or changed under the working directory during a run, to
// be stored with its record.
type Artifact struct {
	// Name is its path relative to /home/pyodide in the plain form it is stored,
	// shown and downloaded under (ArtifactName): no hidden characters.
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Data        []byte `json:"-"`
	Size        int64  `json:"size"`
}

// Display is one item a run shows to the user, the way Jupyter does: display(obj), a
// trailing expression with a rich repr, or a matplotlib figure at plt.show(). Text
// parts are as Python gave them (HTML and SVG are the browser's to sanitize); an image
// is decoded and measured by the engine, never trusted from the process. Its record
// keeps the text parts, and the image as the id of its stored file.
type Display struct {
	Kind string `json:"kind"` // DisplayItem or DisplayResult; while a run streams, also DisplayUpdate or DisplayClear
	// ID is the item's display_id (IPython's display(…, display_id=…)): an update of that
	// id draws the item anew, in place.
	ID       string          `json:"id,omitempty"`
	Text     string          `json:"text"` // text/plain, always present
	HTML     string          `json:"html,omitempty"`
	Markdown string          `json:"markdown,omitempty"`
	SVG      string          `json:"svg,omitempty"`
	LaTeX    string          `json:"latex,omitempty"`
	JSON     json.RawMessage `json:"json,omitempty"`
	// Plotly is a Plotly figure (application/vnd.plotly.v1+json), drawn by the client's
	// own copy of Plotly.
	Plotly json.RawMessage `json:"plotly,omitempty"`
	Image  *DisplayImage   `json:"image,omitempty"`
	// At is where in the run's output the item was shown. Items of runs recorded before
	// it was kept have none, and show after the output.
	At *OutputAt `json:"at,omitempty"`
}

// Kinds of a Display. A run's record holds items of the first two; the other two reach
// its caller while it runs and are applied to the record: DisplayUpdate draws the items
// of its ID anew in place (a display handle's update), DisplayClear takes away what the
// run showed until its At (IPython's clear_output), its output included.
const (
	DisplayItem   = "display"
	DisplayResult = "result" // a trailing expression's rich form
	DisplayUpdate = "update"
	DisplayClear  = "clear"
)

// OutputAt places a display item in its run's output: the bytes of Stdout and of
// Stderr written before it, so a client draws text and items in the order they came.
type OutputAt struct {
	Stdout int `json:"stdout"`
	Stderr int `json:"stderr"`
}

// DisplayImage is a raster image of a display item. The server stores it as a file;
// FileID names that file once stored (zero while the run streams).
type DisplayImage struct {
	Name        string `json:"name"` // plain, like an Artifact's
	ContentType string `json:"content_type"`
	Width       int    `json:"width"`
	Height      int    `json:"height"`
	Size        int64  `json:"size"`
	FileID      int64  `json:"file_id,omitempty"`
	Data        []byte `json:"-"`

	// DrawWidth and DrawHeight, when the code gave them, are the size to draw it at, in
	// CSS pixels (IPython's Image(width=…, height=…)); 0 is its own.
	DrawWidth  int `json:"draw_width,omitempty"`
	DrawHeight int `json:"draw_height,omitempty"`
}

// SessionRun is one finished run of a session as its record keeps it: what rebuilding
// the session by replay reads when the sandbox's store lost it.
type SessionRun struct {
	Code       string
	Status     string
	StartedAt  time.Time
	FinishedAt time.Time
}
