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

// parseDisplay checks one display frame from a session process. A frame no honest
// driver sends (bad kind, not JSON, a non-string part, an image that does not decode)
// is an error, and the process is killed; n numbers the run's images for their names.
func parseDisplay(kind, item string, maxImage int64, n int) (sandchat.Display, error) {
	if kind != "display" && kind != "result" {
		return sandchat.Display{}, fmt.Errorf("display kind %q", kind)
	}
	var b struct {
		Data     map[string]json.RawMessage `json:"data"`
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(item), &b); err != nil {
		return sandchat.Display{}, fmt.Errorf("display item: %v", err)
	}
	if len(b.Data) == 0 || len(b.Data) > 32 {
		return sandchat.Display{}, fmt.Errorf("display item with %d parts", len(b.Data))
	}
	d := sandchat.Display{Kind: kind}
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

// displaySize is what a display item weighs against MaxDisplayBytes.
func displaySize(d sandchat.Display) int64 {
	n := int64(len(d.Text) + len(d.HTML) + len(d.Markdown) + len(d.SVG) + len(d.LaTeX) + len(d.JSON) + len(d.Plotly))
	if d.Image != nil {
		n += d.Image.Size
	}
	return n
}

// displays collects a run's display items as their frames arrive, within the run's
// budget: items past it are counted and the run's stderr says how many were not shown.
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
}

// wrote counts output the process sent, to place the items that follow it.
func (c *displays) wrote(stream string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stream == "stderr" {
		c.at.Stderr += n
	} else {
		c.at.Stdout += n
	}
}

func (c *displays) add(kind, item string) error {
	c.mu.Lock()
	d, err := parseDisplay(kind, item, c.maxImage, c.images+1)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	if len(c.items) >= c.max || c.bytes+displaySize(d) > c.maxBytes {
		c.dropped++
		c.mu.Unlock()
		return nil
	}
	if d.Image != nil {
		c.images++
	}
	at := c.at
	d.At = &at
	c.bytes += displaySize(d)
	c.items = append(c.items, d)
	on := c.on
	c.mu.Unlock()
	if on != nil {
		on(d)
	}
	return nil
}

// done returns the items and stderr with a note of what did not fit; stderrBefore is
// what the engine put ahead of the process's own stderr.
func (c *displays) done(stderr string, stderrBefore, droppedInProcess int) ([]sandchat.Display, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, d := range c.items {
		at := *d.At
		at.Stderr += stderrBefore
		c.items[i].At = &at
	}
	if n := c.dropped + droppedInProcess; n > 0 {
		stderr += fmt.Sprintf("[sandbox] %d display items not shown: over the limit of %d items or %d bytes per run\n", n, c.max, c.maxBytes)
	}
	items := c.items
	if items == nil {
		items = []sandchat.Display{}
	}
	return items, stderr
}
