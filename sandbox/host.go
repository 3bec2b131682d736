package sandbox

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxFrame bounds what a host may send in one frame; a session's heap is at most 4 GiB
// but its delta travels compressed only after Go receives it.
const maxFrame = 1 << 31

// errHostGone is returned for calls in flight when the host process exits.
var errHostGone = errors.New("sandbox host process exited")

// blob is how a frame's JSON points at bytes in the frame's binary section.
type blob struct {
	B []int `json:"$b"`
}

type frame struct {
	raw json.RawMessage
	bin []byte
}

func (f frame) bytes(b *blob) []byte {
	if b == nil || len(b.B) != 2 || b.B[0] < 0 || b.B[1] < 0 || b.B[0]+b.B[1] > len(f.bin) {
		return nil
	}
	return f.bin[b.B[0] : b.B[0]+b.B[1]]
}

// out collects the binary blobs of a frame being built.
type out struct {
	bins [][]byte
	n    int
}

func (o *out) add(b []byte) blob {
	r := blob{B: []int{o.n, len(b)}}
	o.bins = append(o.bins, b)
	o.n += len(b)
	return r
}

// host is one Deno process and the Go end of its frame protocol.
type host struct {
	idx int
	log *slog.Logger
	cmd *exec.Cmd
	in  io.WriteCloser

	wmu sync.Mutex

	mu      sync.Mutex
	pending map[int64]chan frame
	outputs map[string]func(stream, chunk string)
	nextID  int64
	bases   map[string]bool
	live    int // sessions on this host, for placement

	done     chan struct{}
	diedWhy  atomic.Value // string
	exitErr  error
	denoVers string
}

type hostOptions struct {
	cfg      Config
	cacheDir string
}

func startHost(idx int, o hostOptions, log *slog.Logger) (*host, error) {
	cfg := o.cfg
	reads := []string{cfg.PyodideDir, cfg.RuntimeDir}
	if cfg.PackageDir != "" && cfg.PackageDir != cfg.PyodideDir {
		reads = append(reads, cfg.PackageDir)
	}
	args := []string{"run", "--no-prompt", "--no-config", "--no-lock", "--no-remote", "--no-npm",
		"--unstable-worker-options", "--quiet",
		"--allow-read=" + strings.Join(reads, ","),
		// Each isolate's JS heap is bounded; ArrayBuffers are not, hence the RSS watchdog.
		"--v8-flags=--max-old-space-size=" + strconv.FormatInt(min(cfg.HostMemoryBytes>>20, 2048), 10),
	}
	if nets := netAllow(cfg); len(nets) > 0 {
		args = append(args, "--allow-net="+strings.Join(nets, ","))
	}
	args = append(args, filepath.Join(cfg.RuntimeDir, "host.ts"))
	cmd := exec.Command(cfg.DenoPath, args...)
	// An explicit, minimal environment: the parent's (database URLs, API keys) never
	// reaches a process that runs user code.
	cmd.Env = []string{"DENO_DIR=" + o.cacheDir, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1", "DENO_NO_PROMPT=1", "HOME=" + o.cacheDir}
	cmd.Dir = cfg.RuntimeDir
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start deno: %w", err)
	}
	h := &host{
		idx: idx, log: log.With("host", idx, "pid", cmd.Process.Pid), cmd: cmd, in: in,
		pending: map[int64]chan frame{}, outputs: map[string]func(string, string){},
		bases: map[string]bool{}, done: make(chan struct{}),
	}
	go h.logStderr(stderr)
	go h.read(stdout)
	return h, nil
}

func netAllow(cfg Config) []string {
	nets := append([]string(nil), cfg.NetworkAllow...)
	if cfg.PackageCDN != "" {
		// Packages load inside the Worker, so the CDN is reachable from user code too.
		if u, err := urlHost(cfg.PackageCDN); err == nil {
			nets = append(nets, u)
		}
	}
	return nets
}

func (h *host) logStderr(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	// User code can reach the host's stderr (through Pyodide's fatal-error paths, say):
	// log a bounded number of lines per minute so it cannot flood the server's logs.
	const perMinute = 50
	window, n := time.Now(), 0
	for sc.Scan() {
		if time.Since(window) > time.Minute {
			if n > perMinute {
				h.log.Warn("sandbox host stderr lines dropped", "count", n-perMinute)
			}
			window, n = time.Now(), 0
		}
		if n++; n <= perMinute {
			h.log.Warn("sandbox host stderr", "line", sc.Text())
		}
	}
}

func (h *host) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<20)
	var err error
	for {
		var f frame
		if f, err = readFrame(br); err != nil {
			break
		}
		var head struct {
			ID     int64  `json:"id"`
			Op     string `json:"op"`
			SID    string `json:"sid"`
			Stream string `json:"stream"`
			Chunk  string `json:"chunk"`
		}
		if err = json.Unmarshal(f.raw, &head); err != nil {
			break
		}
		if head.Op == "out" {
			h.mu.Lock()
			fn := h.outputs[head.SID]
			h.mu.Unlock()
			if fn != nil {
				fn(head.Stream, head.Chunk)
			}
			continue
		}
		h.mu.Lock()
		ch := h.pending[head.ID]
		delete(h.pending, head.ID)
		h.mu.Unlock()
		if ch != nil {
			ch <- f
		}
	}
	h.exitErr = h.cmd.Wait()
	if !errors.Is(err, io.EOF) {
		h.log.Error("sandbox host protocol", "err", err)
	}
	h.mu.Lock()
	for id, ch := range h.pending {
		close(ch)
		delete(h.pending, id)
	}
	h.mu.Unlock()
	close(h.done)
}

func readFrame(r io.Reader) (frame, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n < 4 || n > maxFrame {
		return frame{}, fmt.Errorf("bad frame length %d", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return frame{}, err
	}
	jl := binary.BigEndian.Uint32(body[:4])
	if int(jl) > len(body)-4 {
		return frame{}, fmt.Errorf("bad json length %d", jl)
	}
	return frame{raw: body[4 : 4+jl], bin: body[4+jl:]}, nil
}

func (h *host) alive() bool {
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// send writes one frame; id 0 means no reply is expected.
func (h *host) send(msg map[string]any, o *out) error {
	js, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	var bins [][]byte
	n := 0
	if o != nil {
		bins, n = o.bins, o.n
	}
	hdr := make([]byte, 8)
	binary.BigEndian.PutUint32(hdr[:4], uint32(4+len(js)+n))
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(js)))
	h.wmu.Lock()
	defer h.wmu.Unlock()
	bufs := append([][]byte{hdr, js}, bins...)
	for _, b := range bufs {
		if _, err := h.in.Write(b); err != nil {
			return fmt.Errorf("%w: %v", errHostGone, err)
		}
	}
	return nil
}

// call sends a request and waits for its reply. ctx only bounds the wait: the host
// finishes the operation regardless, which is what a Worker mid-restore needs.
func (h *host) call(ctx context.Context, msg map[string]any, o *out) (frame, error) {
	ch := make(chan frame, 1)
	h.mu.Lock()
	h.nextID++
	id := h.nextID
	h.pending[id] = ch
	h.mu.Unlock()
	msg["id"] = id
	if !h.alive() {
		return frame{}, errHostGone
	}
	if err := h.send(msg, o); err != nil {
		return frame{}, err
	}
	select {
	case f, ok := <-ch:
		if !ok {
			return frame{}, errHostGone
		}
		var r struct {
			OK    bool            `json:"ok"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(f.raw, &r); err != nil {
			return frame{}, err
		}
		if !r.OK {
			var msg string
			_ = json.Unmarshal(r.Error, &msg)
			return f, &hostError{msg: msg}
		}
		return f, nil
	case <-ctx.Done():
		h.mu.Lock()
		delete(h.pending, id)
		h.mu.Unlock()
		return frame{}, ctx.Err()
	}
}

// hostError is an operation the host refused or a Worker failed.
type hostError struct{ msg string }

func (e *hostError) Error() string { return "sandbox host: " + e.msg }

// rss reads the host's resident memory; Workers live in the same process, so this is
// everything user code can make the host allocate.
func (h *host) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

func (h *host) kill(why string) {
	h.diedWhy.CompareAndSwap(nil, why)
	_ = h.cmd.Process.Kill()
}

func (h *host) why() string {
	if s, ok := h.diedWhy.Load().(string); ok {
		return s
	}
	return "the sandbox process stopped unexpectedly"
}

func (h *host) close() {
	_ = h.in.Close()
	select {
	case <-h.done:
	case <-time.After(2 * time.Second):
		h.kill("closed")
		<-h.done
	}
}
