package session

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/jpeg" // DecodeConfig of displayed JPEGs
	_ "image/png"  // and PNGs
	"path"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/sandchat/sandchat"
)

// displayTextMax bounds each text part of one display item.
const displayTextMax = 1 << 20

// maxDisplayID bounds a display_id.
const maxDisplayID = 256

// parseDisplay checks one display frame from a session process: an item, or an update
// of the items of its display_id. A frame no honest driver sends (bad kind, not JSON, a
// non-string part, an image that does not decode, an update without an id) is an
// error, and the process is killed; n numbers the run's images for their names.
func parseDisplay(kind, item string, maxImage int64, n int) (sandchat.Display, error) {
	if kind != sandchat.DisplayItem && kind != sandchat.DisplayResult && kind != sandchat.DisplayUpdate {
		return sandchat.Display{}, fmt.Errorf("display kind %q", kind)
	}
	var b struct {
		Data      map[string]json.RawMessage `json:"data"`
		Metadata  map[string]json.RawMessage `json:"metadata"`
		Transient struct {
			DisplayID string `json:"display_id"`
		} `json:"transient"`
	}
	if err := json.Unmarshal([]byte(item), &b); err != nil {
		return sandchat.Display{}, fmt.Errorf("display item: %v", err)
	}
	if len(b.Data) == 0 || len(b.Data) > 32 {
		return sandchat.Display{}, fmt.Errorf("display item with %d parts", len(b.Data))
	}
	id := b.Transient.DisplayID
	if len(id) > maxDisplayID || !utf8.ValidString(id) || kind == sandchat.DisplayUpdate && id == "" {
		return sandchat.Display{}, fmt.Errorf("display id %.40q", id)
	}
	d := sandchat.Display{Kind: kind, ID: id}
	text := func(mime string) (string, error) {
		raw, ok := b.Data[mime]
		if !ok {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("display part %s is not a string", mime)
		}
		if len(s) > displayTextMax {
			s = truncUTF8(s, displayTextMax) + "\n[... truncated ...]"
		}
		return strings.ToValidUTF8(s, "\uFFFD"), nil
	}
	var err error
	for _, p := range []struct {
		mime string
		dst  *string
	}{{"text/plain", &d.Text}, {"text/html", &d.HTML}, {"text/markdown", &d.Markdown}, {"image/svg+xml", &d.SVG}, {"text/latex", &d.LaTeX}} {
		if *p.dst, err = text(p.mime); err != nil {
			return sandchat.Display{}, err
		}
	}
	for _, p := range []struct {
		mime string
		dst  *json.RawMessage
	}{{"application/json", &d.JSON}, {"application/vnd.plotly.v1+json", &d.Plotly}} {
		js, err := text(p.mime)
		if err != nil {
			return sandchat.Display{}, err
		}
		if js == "" {
			continue
		}
		if !json.Valid([]byte(js)) || len(js) > displayTextMax {
			return sandchat.Display{}, fmt.Errorf("display part %s is not JSON", p.mime)
		}
		*p.dst = json.RawMessage(js)
	}
	for _, mime := range []string{"image/png", "image/jpeg"} {
		enc, err := text(mime)
		if err != nil || enc == "" {
			if err != nil {
				return sandchat.Display{}, err
			}
			continue
		}
		if int64(base64.StdEncoding.DecodedLen(len(enc))) > maxImage {
			return sandchat.Display{}, fmt.Errorf("display image over %d bytes", maxImage)
		}
		data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
		if err != nil {
			return sandchat.Display{}, fmt.Errorf("display image is not base64")
		}
		cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
		if err != nil || "image/"+format != mime {
			return sandchat.Display{}, fmt.Errorf("display part %s is not a %s image", mime, mime)
		}
		ext := map[string]string{"png": ".png", "jpeg": ".jpg"}[format]
		name := fmt.Sprintf("display-%d%s", n, ext)
		var meta struct {
			Filename string `json:"filename"`
		}
		if raw, ok := b.Metadata["filename"]; ok && json.Unmarshal(raw, &meta.Filename) == nil {
			// A figure saved at plt.show() names its artifact, so it is stored once.
			if f := meta.Filename; f != "" && len(f) < 256 && !strings.ContainsAny(f, "/\\\x00") && path.Ext(f) == ext {
				name = sandchat.ArtifactName(f) // the artifact's name is in its plain form too
			}
		}
		d.Image = &sandchat.DisplayImage{Name: name, ContentType: mime, Width: cfg.Width, Height: cfg.Height, Size: int64(len(data)), Data: data}
		// The size to draw it at, when the code gave one (IPython's Image(width=…)).
		var size struct{ Width, Height float64 }
		if raw, ok := b.Metadata[mime]; ok && json.Unmarshal(raw, &size) == nil {
			d.Image.DrawWidth, d.Image.DrawHeight = drawSize(size.Width), drawSize(size.Height)
		}
		break
	}
	if d.Text == "" {
		d.Text = "<display>"
	}
	return d, nil
}

// drawSize is a size to draw an image at, in CSS pixels: 0 (its own) unless within
// bounds.
func drawSize(v float64) int {
	if v < 1 || v > 10000 {
		return 0
	}
	return int(v)
}

// nameImages gives each display image of a run the name its file is stored under: its
// own when an artifact or an earlier image of that name has the same bytes (shown
// twice: one file), else the name of an artifact with the same bytes (savefig, then
// display: one file), else its own, numbered when an artifact or an earlier image has
// it. Every image shown then has a file of its name (see toolkits).
func nameImages(res *Result) {
	files := map[string][]byte{}
	for _, a := range res.Artifacts {
		files[a.Name] = a.Data
	}
	for _, d := range res.Displays {
		img := d.Image
		if img == nil {
			continue
		}
		if b, ok := files[img.Name]; ok && bytes.Equal(b, img.Data) {
			continue
		}
		if i := slices.IndexFunc(res.Artifacts, func(a sandchat.Artifact) bool { return bytes.Equal(a.Data, img.Data) }); i >= 0 {
			img.Name = res.Artifacts[i].Name
			continue
		}
		img.Name = sandchat.UniqueArtifactName(img.Name, func(n string) bool { _, taken := files[n]; return taken })
		files[img.Name] = img.Data
	}
}

func truncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// parseClear checks a clear frame (IPython's clear_output): wait says it takes effect
// with the next output or item, not at once.
func parseClear(item string) (wait bool, err error) {
	var b struct {
		Wait bool `json:"wait"`
	}
	if err := json.Unmarshal([]byte(item), &b); err != nil {
		return false, fmt.Errorf("clear frame: %v", err)
	}
	return b.Wait, nil
}

// displaySize is what a display item weighs against MaxDisplayBytes.
func displaySize(d sandchat.Display) int64 {
	n := int64(len(d.Text) + len(d.HTML) + len(d.Markdown) + len(d.SVG) + len(d.LaTeX) + len(d.JSON) + len(d.Plotly))
	if d.Image != nil {
		n += d.Image.Size
	}
	return n
}

// maxLiveChanges bounds the updates and clears a run tells its caller while it runs (a
// progress loop may make thousands): past it they still shape its record, which its
// caller gets at the end.
const maxLiveChanges = 1000

// displays collects a run's display items as their frames arrive, within the run's
// budget: items past it are counted and the run's stderr says how many were not shown.
// An update draws the items of its id anew, in place; a clear takes away the items and
// the output before it (finish cuts the output), at once or, waiting, with what comes
// next: the run's record holds what the run shows at its end, as a notebook keeps it.
type displays struct {
	max      int
	maxBytes int64
	maxImage int64
	on       func(sandchat.Display)

	mu      sync.Mutex // guards the fields below: the reader and the run's end both reach them
	items   []sandchat.Display
	bytes   int64
	dropped int
	images  int
	// at is the run's output so far: the process sends what was printed before an item
	// ahead of the item, on the same pipe.
	at sandchat.OutputAt
	// cleared is where the output was last cleared (nothing shows of what came before);
	// waiting, a clear that applies with the next output or item.
	cleared sandchat.OutputAt
	waiting bool
	changes int // updates and clears told to on
}

// wrote counts output the process sent, to place the items that follow it. A waiting
// clear applies first: its caller hears of it before the output that follows it.
func (c *displays) wrote(stream string, n int) {
	c.mu.Lock()
	clear := c.applyWaitingLocked()
	if stream == "stderr" {
		c.at.Stderr += n
	} else {
		c.at.Stdout += n
	}
	c.mu.Unlock()
	c.tell(clear)
}

// applyWaitingLocked applies a waiting clear, and returns it to tell, if any.
func (c *displays) applyWaitingLocked() *sandchat.Display {
	if !c.waiting {
		return nil
	}
	return c.clearLocked()
}

// clearLocked takes away what the run showed so far, and returns the clear to tell (nil
// past maxLiveChanges).
func (c *displays) clearLocked() *sandchat.Display {
	c.items, c.bytes, c.waiting = nil, 0, false
	c.cleared = c.at
	if c.changes++; c.changes > maxLiveChanges {
		return nil
	}
	at := c.at
	return &sandchat.Display{Kind: sandchat.DisplayClear, At: &at}
}

// tell hands d to the run's caller, outside the lock.
func (c *displays) tell(d *sandchat.Display) {
	if d != nil && c.on != nil {
		c.on(*d)
	}
}

func (c *displays) add(kind, item string) error {
	if kind == sandchat.DisplayClear {
		wait, err := parseClear(item)
		if err != nil {
			return err
		}
		c.mu.Lock()
		var clear *sandchat.Display
		if wait {
			c.waiting = true
		} else {
			clear = c.clearLocked()
		}
		c.mu.Unlock()
		c.tell(clear)
		return nil
	}
	c.mu.Lock()
	d, err := parseDisplay(kind, item, c.maxImage, c.images+1)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	clear := c.applyWaitingLocked()
	shown := c.updateLocked(&d)
	if d.Kind != sandchat.DisplayUpdate {
		shown = c.appendLocked(&d)
	}
	c.mu.Unlock()
	c.tell(clear)
	if shown {
		c.tell(&d)
	}
	return nil
}

// appendLocked adds item d, within the run's budget, and tells whether it is shown.
func (c *displays) appendLocked(d *sandchat.Display) bool {
	if len(c.items) >= c.max || c.bytes+displaySize(*d) > c.maxBytes {
		c.dropped++
		return false
	}
	if d.Image != nil {
		c.images++
	}
	at := c.at
	d.At = &at
	c.bytes += displaySize(*d)
	c.items = append(c.items, *d)
	return true
}

// updateLocked draws the items of an update's id anew with its parts, where and as what
// they were shown, and tells whether its caller hears of it. An id no item of the run
// has changes nothing (its item went with a clear, or was shown by an earlier run).
func (c *displays) updateLocked(d *sandchat.Display) bool {
	if d.Kind != sandchat.DisplayUpdate {
		return false
	}
	size, found := c.bytes, false
	for _, it := range c.items {
		if it.ID == d.ID {
			size += displaySize(*d) - displaySize(it)
			found = true
		}
	}
	if !found {
		return false
	}
	if size > c.maxBytes {
		c.dropped++
		return false
	}
	if d.Image != nil {
		c.images++
	}
	for i, it := range c.items {
		if it.ID == d.ID {
			c.items[i] = *d
			c.items[i].Kind, c.items[i].At = it.Kind, it.At
		}
	}
	c.bytes = size
	if c.changes++; c.changes > maxLiveChanges {
		return false
	}
	return true
}

// finish gives res the run's items, and a note in its stderr of what did not fit; its
// output (and the order of its streams) loses what a clear took away. stderrBefore is
// what the engine put ahead of the process's own stderr. A clear still waiting when
// the run ended never applied: what it would have taken away stays.
func (c *displays) finish(res *Result, stderrBefore, droppedInProcess int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cut := c.cleared
	res.Stdout = res.Stdout[min(cut.Stdout, len(res.Stdout)):]
	if cut.Stderr > 0 && stderrBefore <= len(res.Stderr) {
		res.Stderr = res.Stderr[:stderrBefore] + res.Stderr[min(stderrBefore+cut.Stderr, len(res.Stderr)):]
	}
	var order []sandchat.OutputAt
	for i, at := range res.Order {
		if i == 0 && at == (sandchat.OutputAt{Stderr: stderrBefore}) && cut != (sandchat.OutputAt{}) {
			order = append(order, at) // the engine's notes, ahead of the output
			continue
		}
		if at.Stdout >= cut.Stdout && at.Stderr >= stderrBefore+cut.Stderr {
			order = append(order, sandchat.OutputAt{Stdout: at.Stdout - cut.Stdout, Stderr: at.Stderr - cut.Stderr})
		}
	}
	res.Order = order
	for i, d := range c.items {
		at := sandchat.OutputAt{Stdout: d.At.Stdout - cut.Stdout, Stderr: d.At.Stderr - cut.Stderr + stderrBefore}
		c.items[i].At = &at
	}
	if n := c.dropped + droppedInProcess; n > 0 {
		res.Stderr += fmt.Sprintf("[sandbox] %d display items not shown: over the limit of %d items or %d bytes per run\n", n, c.max, c.maxBytes)
	}
	res.Displays = c.items
	if res.Displays == nil {
		res.Displays = []sandchat.Display{}
	}
}
