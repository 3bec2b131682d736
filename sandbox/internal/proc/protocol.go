package proc

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// The frame protocol between the engine and one session process; runtime/protocol.ts is
// its other half. A frame is: u32 BE length of the rest, u32 BE length of a JSON header,
// the JSON, then binary blobs that the JSON points at with {"$b":[offset,length]}.
//
// Requests go on the process's fd 3 and replies come back on its fd 4, pipes that only
// the process's control thread opens. Everything that comes back is checked: a reply
// with the wrong id, shape or size gets the process killed.

// Blob points at bytes in a frame's binary section.
type Blob struct {
	B []int `json:"$b"`
}

// Frame is one frame as read: its JSON and its binary section.
type Frame struct {
	JSON json.RawMessage
	Bin  []byte
}

// Bytes resolves a blob; nil when it is absent or points outside the frame.
func (f Frame) Bytes(b *Blob) []byte {
	if !f.Valid(b) {
		return nil
	}
	return f.Bin[b.B[0] : b.B[0]+b.B[1]]
}

// Valid tells whether b points inside the frame.
func (f Frame) Valid(b *Blob) bool {
	return b != nil && len(b.B) == 2 && b.B[0] >= 0 && b.B[1] >= 0 && b.B[0] <= len(f.Bin) && b.B[1] <= len(f.Bin)-b.B[0]
}

// Blobs collects the binary sections of a frame being built.
type Blobs struct {
	parts []part
	n     int
}

// part is one binary section: bytes, or n bytes that write produces as the frame goes out.
type part struct {
	b     []byte
	n     int
	write func(io.Writer) error
}

// Add appends b to the frame's binary section and points at it; nil for nil.
func (o *Blobs) Add(b []byte) *Blob {
	if b == nil {
		return nil
	}
	r := &Blob{B: []int{o.n, len(b)}}
	o.parts = append(o.parts, part{b: b, n: len(b)})
	o.n += len(b)
	return r
}

// AddStream appends n bytes that write produces while the frame is written, so the
// engine never holds them whole (a session's heap, decompressed as it goes out). write
// must write exactly n bytes: a frame cut short or overlong is not sent on.
func (o *Blobs) AddStream(n int, write func(io.Writer) error) *Blob {
	r := &Blob{B: []int{o.n, n}}
	o.parts = append(o.parts, part{n: n, write: write})
	o.n += n
	return r
}

// frameChunk is the most a frame's buffer grows by before its bytes have come: a
// frame that claims a size is buffered as it arrives, never reserved from its claim.
const frameChunk = 4 << 20

// ReadFrame reads one frame (u32 length, u32 JSON length, the JSON, the binary
// section; big-endian), refusing one over limit bytes before reading any of it. Its
// buffers grow with the bytes that actually come (to at most twice them, plus
// frameChunk), so a length a process only claims costs no memory.
func ReadFrame(r io.Reader, limit int) (Frame, error) {
	return readFrame(r, func() int { return limit })
}

// readFrame is ReadFrame with the limit asked for once the frame's length has come:
// the call it answers may have begun while the reader waited for it.
func readFrame(r io.Reader, limitNow func() int) (Frame, error) {
	js, bin, err := readHead(r, limitNow)
	if err != nil {
		return Frame{}, err
	}
	b, err := readBody(r, bin)
	if err != nil {
		return Frame{}, err
	}
	return Frame{JSON: js, Bin: b}, nil
}

// readHead reads a frame's length and its JSON, and leaves its binary section, bin
// bytes, in r.
func readHead(r io.Reader, limitNow func() int) (js json.RawMessage, bin int, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, err
	}
	limit := limitNow()
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 4 || int64(n) > int64(limit) {
		return nil, 0, fmt.Errorf("frame of %d bytes refused (limit %d)", n, limit)
	}
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, unexpected(err)
	}
	jl := binary.BigEndian.Uint32(hdr[:])
	if int64(jl) > int64(n)-4 {
		return nil, 0, fmt.Errorf("bad json length %d", jl)
	}
	js, err = readBody(r, int(jl))
	return js, int(n) - 4 - int(jl), err
}

// readBody reads n bytes into a buffer that grows with the bytes that come.
func readBody(r io.Reader, n int) ([]byte, error) {
	body := make([]byte, 0, min(n, frameChunk))
	for len(body) < n {
		if len(body) == cap(body) {
			body = slices.Grow(body, min(n-len(body), max(len(body), frameChunk)))
		}
		k, err := io.ReadFull(r, body[len(body):min(n, cap(body))])
		body = body[:len(body)+k]
		if err != nil {
			return nil, unexpected(err)
		}
	}
	return body, nil
}

// unexpected is a frame that ends early: its end is no frame boundary.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// WriteFrame writes msg as JSON with o's bytes as the frame's binary section.
func WriteFrame(w io.Writer, msg any, o *Blobs) error {
	js, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	var parts []part
	n := 0
	if o != nil {
		parts, n = o.parts, o.n
	}
	// Padding after the JSON starts the binary part 16-aligned in the body the process
	// reads, so a snapshot in it can be used where it lies.
	for (4+len(js))%16 != 0 {
		js = append(js, ' ')
	}
	hdr := make([]byte, 8)
	binary.BigEndian.PutUint32(hdr[:4], uint32(4+len(js)+n))
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(js)))
	for _, p := range append([]part{{b: hdr}, {b: js}}, parts...) {
		if p.write == nil {
			if _, err := w.Write(p.b); err != nil {
				return err
			}
			continue
		}
		cw := &exactWriter{w: w, left: p.n}
		if err := p.write(cw); err != nil {
			return err
		}
		if cw.left != 0 {
			return fmt.Errorf("a streamed blob came %d bytes short", cw.left)
		}
	}
	return nil
}

// exactWriter passes on at most left bytes.
type exactWriter struct {
	w    io.Writer
	left int
}

func (e *exactWriter) Write(p []byte) (int, error) {
	if len(p) > e.left {
		return 0, fmt.Errorf("a streamed blob is longer than it said")
	}
	n, err := e.w.Write(p)
	e.left -= n
	return n, err
}

// ---- requests ----

// RuntimeConfig is what every session process is primed with: where Pyodide and its
// packages are, what it may read and reach, and its limits.
type RuntimeConfig struct {
	PyodideURL      string   `json:"pyodideURL"`
	PyodideDir      string   `json:"pyodideDir"`
	LockFileURL     *string  `json:"lockFileURL"`
	PackageBaseURL  *string  `json:"packageBaseURL"`
	Memory          int64    `json:"memory"`
	MaxOutput       int      `json:"maxOutput"`
	MaxFileBytes    int64    `json:"maxFileBytes"`
	MaxFiles        int      `json:"maxFiles"`
	MaxDisplays     int      `json:"maxDisplays"`
	MaxDisplayBytes int64    `json:"maxDisplayBytes"`
	Read            []string `json:"read"`
	Net             []string `json:"net"`
}

// PrimeReq starts a process's Worker with Pyodide imported and names the base
// snapshot it loads.
type PrimeReq struct {
	Op     string        `json:"op"` // prime
	Config RuntimeConfig `json:"config"`
	// BasePath is the packed base's file as the process sees it (sandbox/basepack.go).
	BasePath string `json:"basePath,omitempty"`
	// Warmup restores the base once in a throwaway Worker, so that Pyodide's wasm is
	// compiled before a restore needs it: for spares, which wait for one.
	Warmup bool `json:"warmup,omitempty"`
}

// BootReq boots a fresh interpreter whose heap becomes a new base snapshot.
type BootReq struct {
	Op      string   `json:"op"`      // boot
	Preload []string `json:"preload"` // imported before the base snapshot is taken
}

// LoadReq loads the interpreter from the base, with a saved session's heap when Header
// and Delta are set.
type LoadReq struct {
	Op     string `json:"op"` // load
	Header *Blob  `json:"header,omitempty"`
	Delta  *Blob  `json:"delta,omitempty"`
	Warm   bool   `json:"warm"`
}

// FileBlob is a saved file of the session's working directory.
type FileBlob struct {
	Path string `json:"path"`
	Data *Blob  `json:"data"`
}

// Link is a symbolic link of the working directory: its path there and its target.
type Link struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// TreeReq is a saved working directory as an attach sends it, its files' contents in
// o; sorted, so that one tree is always sent alike.
func TreeReq(t state.Tree, o *Blobs) (files []FileBlob, dirs []string, links []Link, cwd string) {
	files, dirs, links = []FileBlob{}, append([]string{}, t.Dirs...), []Link{}
	for _, p := range slices.Sorted(maps.Keys(t.Files)) {
		files = append(files, FileBlob{Path: p, Data: o.Add(t.Files[p])})
	}
	slices.Sort(dirs)
	for _, p := range slices.Sorted(maps.Keys(t.Links)) {
		links = append(links, Link{Path: p, Target: t.Links[p]})
	}
	return files, dirs, links, t.Cwd
}

// DataFile is a file of /data (an upload) the process does not hold yet.
type DataFile struct {
	Name string `json:"name"`
	Data *Blob  `json:"data"`
}

// AttachReq makes a loaded interpreter a session's: its files, packages and the cells to
// replay.
type AttachReq struct {
	Op     string     `json:"op"` // attach
	Reseed bool       `json:"reseed"`
	Files  []FileBlob `json:"files"`
	// Dirs, Links and Cwd are the rest of the saved working directory: its directories
	// (empty ones included), its symbolic links, and the current directory to go back to
	// ("" for the working directory).
	Dirs     []string   `json:"dirs"`
	Links    []Link     `json:"links"`
	Cwd      string     `json:"cwd"`
	Packages []string   `json:"packages"`
	Pip      []PipWheel `json:"pip"` // wheels micropip installed, from the cache
	Cells    []string   `json:"cells"`
	// CellTimeouts is each cell's time limit in ms: past it the replay interrupts the
	// cell, past it plus GraceMS the process is stopped, and the restore says which.
	CellTimeouts []int64 `json:"cellTimeouts"`
	GraceMS      int64   `json:"graceMs"`
	// Data is /data as the run about to happen sees it, mounted before cells replay:
	// a replayed cell may import or read an upload.
	Data []DataFile `json:"data"`
}

// RunReq runs code.
type RunReq struct {
	Op       string     `json:"op"` // run
	Code     string     `json:"code"`
	Filename string     `json:"filename"`
	Data     []DataFile `json:"data"` // only what the process does not hold yet
	// DataVersions is /data as the run sees it, name → version: files not in Data are
	// the process's already.
	DataVersions map[string]string `json:"dataVersions"`
	Preload      []string          `json:"preload"` // imported before the code
}

// StatsReq asks the process how it is; the engine sends it to learn that a session
// process idle (frozen) since its last run is still there before a run is given to it.
type StatsReq struct {
	Op string `json:"op"` // stats
}

// CheckpointReq asks for the session's heap between runs, as a delta against the base.
type CheckpointReq struct {
	Op string `json:"op"` // checkpoint
	// MaxBytes bounds the delta: a heap that differs from the base by more is not
	// diffed at all (the session persists as its cells), so a checkpoint never costs
	// more memory than the state it could keep.
	MaxBytes int64 `json:"maxBytes"`
}

type interruptReq struct {
	ID int64  `json:"id"` // always 0: no reply
	Op string `json:"op"` // interrupt
}

// PipWheel is a wheel micropip installs, at its path in the session's view of the cache.
type PipWheel struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Path    string `json:"path"`
}

// PipDone answers a session's micropip.install request (a "pip" frame).
type PipDone struct {
	Op     string     `json:"op"` // pipDone
	Seq    int64      `json:"seq"`
	Wheels []PipWheel `json:"wheels"`
	Lock   []string   `json:"lock"`
	Error  string     `json:"error,omitempty"`
}

// ---- replies ----

// replyHead is what every frame from a process starts with: a reply to request ID, or
// (ID 0, Op "out") a chunk of a run's output.
type replyHead struct {
	ID        int64  `json:"id"`
	OK        bool   `json:"ok"`
	Op        string `json:"op"`
	Stream    string `json:"stream"`
	Chunk     string `json:"chunk"`
	Truncated bool   `json:"truncated"` // out frames: the stream reached the output limit
	Kind      string `json:"kind"`      // display frames: display | result
	Item      string `json:"item"`      // display frames: the MIME bundle's JSON, checked by parseDisplay
	// pip frames (ID 0): micropip.install asks the engine, which answers with a PipDone
	// request carrying Seq.
	Seq int64           `json:"seq"`
	Req json.RawMessage `json:"req"`
}

// PrimeReply answers PrimeReq.
type PrimeReply struct {
	Deno string `json:"deno"`
}

// BootReply carries the new base snapshot.
type BootReply struct {
	Version  string `json:"version"`
	Snapshot *Blob  `json:"snapshot"`
}

// LoadReply says how long the load took, by phase.
type LoadReply struct {
	Timings map[string]float64 `json:"timings"`
}

// CheckpointReply carries the session's heap as a delta against the base, or why there
// is none.
type CheckpointReply struct {
	Header        *Blob   `json:"header"`
	Delta         *Blob   `json:"delta"`
	SnapshotError *string `json:"snapshotError"` // why the heap cannot be saved
	// TooLarge says the heap can be saved, just not now: it differs from the base by
	// more than the session's state limit.
	TooLarge bool `json:"tooLarge"`
}

// AttachReply says what could not be brought back, if anything.
type AttachReply struct {
	Error *string `json:"error"`
}

// ChangedFile is a file a run wrote in the working directory.
type ChangedFile struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Data *Blob  `json:"data"` // nil when over the size or count limit
}

// RunReply is a run's outcome as the process reports it.
type RunReply struct {
	Status          string             `json:"status"`
	Result          *string            `json:"result"`
	Error           *sandchat.RunError `json:"error"`
	Stdout          string             `json:"stdout"`
	Stderr          string             `json:"stderr"`
	StdoutTruncated bool               `json:"stdoutTruncated"`
	StderrTruncated bool               `json:"stderrTruncated"`
	Changed         []ChangedFile      `json:"changed"`
	Omitted         int                `json:"omitted"` // changed files past the limit, not listed
	Dirs            []string           `json:"dirs"`    // directories the run made
	Links           []Link             `json:"links"`   // symbolic links the run made or retargeted
	Deleted         []string           `json:"deleted"` // paths of any kind the run took away
	Cwd             *string            `json:"cwd"`     // the current directory, when the run moved it
	Unkept          int                `json:"unkept"`  // entries made that cannot be kept (a path too long, or not text)
	Outside         []string           `json:"outside"` // files the run wrote under /tmp, which are not kept
	Packages        []string           `json:"packages"`
	DisplaysDropped int                `json:"displaysDropped"`
}

// Check refuses a run reply that no honest runtime sends (output past maxOutput four
// times over, more than maxFiles changed files, blobs outside the frame); the process is
// then killed.
func (r *RunReply) Check(maxOutput, maxFiles int, f Frame) error {
	switch r.Status {
	case sandchat.StatusSuccess, sandchat.StatusError, sandchat.StatusTimeout:
	default:
		return fmt.Errorf("run status %q", r.Status)
	}
	if len(r.Stdout) > 4*maxOutput+4096 || len(r.Stderr) > 4*maxOutput+4096 {
		return fmt.Errorf("output over limit")
	}
	if len(r.Outside) > 20 || slices.ContainsFunc(r.Outside, func(p string) bool { return len(p) > 4096 }) {
		return fmt.Errorf("%d files outside", len(r.Outside))
	}
	if r.DisplaysDropped < 0 {
		return fmt.Errorf("displays dropped %d", r.DisplaysDropped)
	}
	if len(r.Changed) > maxFiles || r.Omitted < 0 {
		return fmt.Errorf("%d changed files", len(r.Changed))
	}
	if len(r.Dirs) > maxFiles || len(r.Links) > maxFiles || r.Unkept < 0 {
		return fmt.Errorf("%d directories, %d links", len(r.Dirs), len(r.Links))
	}
	// A path names an entry of the working directory (state.PathKeys): never empty, never
	// ending in a slash nor holding a NUL, which the keys of other kinds do.
	badPath := func(p string) bool {
		return p == "" || len(p) > 4096 || strings.ContainsRune(p, 0) || strings.HasSuffix(p, "/")
	}
	badText := func(s string) bool { return len(s) > 4096 || strings.ContainsRune(s, 0) }
	if slices.ContainsFunc(r.Dirs, badPath) || slices.ContainsFunc(r.Deleted, badPath) ||
		slices.ContainsFunc(r.Links, func(l Link) bool { return badPath(l.Path) || l.Target == "" || badText(l.Target) }) ||
		slices.ContainsFunc(r.Changed, func(c ChangedFile) bool { return badPath(c.Path) }) || r.Cwd != nil && (*r.Cwd == "" || badText(*r.Cwd)) {
		return fmt.Errorf("a path of the working directory out of bounds")
	}
	for _, c := range r.Changed {
		if c.Path == "" || len(c.Path) > 4096 || c.Size < 0 {
			return fmt.Errorf("changed file %q", c.Path)
		}
		if c.Data != nil && !f.Valid(c.Data) {
			return fmt.Errorf("changed file %q points outside the frame", c.Path)
		}
	}
	return nil
}
