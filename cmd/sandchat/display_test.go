package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

type imageJSON struct {
	Name        string
	ContentType string `json:"content_type"`
	Width       int
	Height      int
	Size        int64
	FileID      int64 `json:"file_id"`
}

type displayJSON struct {
	Index int
	Kind  string
	Text  string
	HTML  string
	Image *imageJSON
}

// TestDisplayItems: display() of an object with _repr_html_ and of one with _repr_png_
// comes back in the REST result (the image as a stored file) and, in a turn, as
// tool.display events while the code runs; the model gets a compact description, and
// the traceback of a failing cell.
func TestDisplayItems(t *testing.T) {
	t.Parallel()
	_, alice, conv := newEnv(t).coder()
	if r := alice.run(conv, sandboxtest.RichDisplay); r.Status != "success" {
		t.Fatalf("setup: %+v", r)
	}

	checkImage := func(t *testing.T, img *imageJSON) {
		t.Helper()
		if img == nil || img.Width != 12 || img.Height != 8 || img.ContentType != "image/png" || img.FileID == 0 {
			t.Fatalf("image %+v", img)
		}
		resp, body := alice.rawDo("GET", fmt.Sprintf("/api/v1/files/%d", img.FileID), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("download: %d", resp.StatusCode)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(body))
		if err != nil || cfg.Width != 12 || cfg.Height != 8 {
			t.Errorf("downloaded image: %v %+v", err, cfg)
		}
	}

	t.Run("REST result", func(t *testing.T) {
		var r struct {
			runJSON
			Displays []displayJSON
		}
		alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv),
			map[string]any{"code": "display(Table())\ndisplay(Picture())"}, &r)
		if r.Status != "success" || len(r.Displays) != 2 {
			t.Fatalf("status %s displays %+v", r.Status, r.Displays)
		}
		if r.Displays[0].HTML != "<table><tr><td>sales</td><td>42</td></tr></table>" || r.Displays[0].Text != "Table(sales=42)" {
			t.Errorf("html item %+v", r.Displays[0])
		}
		checkImage(t, r.Displays[1].Image)
		if len(r.Artifacts) != 0 {
			t.Errorf("a displayed image is not an artifact of the run: %+v", r.Artifacts)
		}

		// After the run (a page reload), the execution's record shows the same items.
		type recordJSON struct {
			ID       int64
			Displays []displayJSON
		}
		checkRecord := func(t *testing.T, rec recordJSON) {
			t.Helper()
			if len(rec.Displays) != 2 || rec.Displays[0].HTML != r.Displays[0].HTML || rec.Displays[0].Text != "Table(sales=42)" {
				t.Fatalf("stored displays %+v", rec.Displays)
			}
			if img := rec.Displays[1].Image; img == nil || img.FileID != r.Displays[1].Image.FileID {
				t.Fatalf("stored image %+v, streamed %+v", img, r.Displays[1].Image)
			}
			checkImage(t, rec.Displays[1].Image)
		}
		var one recordJSON
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions/%d", conv, r.ID), nil, &one)
		checkRecord(t, one)
		var list []recordJSON
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), nil, &list)
		found := false
		for _, rec := range list {
			if rec.ID == r.ID {
				checkRecord(t, rec)
				found = true
			} else if len(rec.Displays) != 0 {
				t.Errorf("execution %d without display() lists displays %+v", rec.ID, rec.Displays)
			}
		}
		if !found {
			t.Fatalf("execution %d not listed", r.ID)
		}
	})

	t.Run("an image saved and shown is one file, another of its name one of its own", func(t *testing.T) {
		var r struct {
			runJSON
			Displays []displayJSON
		}
		alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": "from IPython.display import Image\n" +
			"open('chart.png', 'wb').write(make_png(12, 8))\n" +
			"display(Image(data=make_png(12, 8)), metadata={'filename': 'chart.png'})\n" +
			"display(Image(data=make_png(10, 6)), metadata={'filename': 'chart.png'})"}, &r)
		if r.Status != "success" || len(r.Displays) != 2 || len(r.Artifacts) != 1 || r.Displays[0].Image == nil || r.Displays[1].Image == nil {
			t.Fatalf("status %s stderr %q artifacts %+v displays %+v", r.Status, r.Stderr, r.Artifacts, r.Displays)
		}
		saved, other := r.Displays[0].Image, r.Displays[1].Image
		if saved.Name != "chart.png" || saved.FileID != r.Artifacts[0].ID {
			t.Errorf("the image saved as chart.png and shown: %+v, want the file %+v", saved, r.Artifacts[0])
		}
		if other.Name != "chart-2.png" || other.FileID == 0 || other.FileID == saved.FileID {
			t.Errorf("another image named chart.png: %+v, want chart-2.png with a file of its own", other)
		}
		checkImage(t, saved)
	})

	t.Run("turn events and model context", func(t *testing.T) {
		ws := alice.socket()
		ws.subscribe(conv, nil)
		status, _ := alice.say(conv, "Show it:\n"+py("print('first')\ndisplay(Table())\ndisplay(Picture())"))
		if status != "completed" {
			t.Fatalf("turn %s", status)
		}
		var order []string
		var items []displayJSON
		for {
			f := ws.expect2()
			switch f.Type {
			case "tool.output":
				order = append(order, "output")
			case "tool.display":
				var d displayJSON
				if err := json.Unmarshal(f.Data, &d); err != nil {
					t.Fatal(err)
				}
				order = append(order, "display")
				items = append(items, d)
			case "tool.completed":
				var c struct{ Displays []displayJSON }
				if err := json.Unmarshal(f.Data, &c); err != nil {
					t.Fatal(err)
				}
				if len(c.Displays) != 2 {
					t.Fatalf("tool.completed displays %+v", c.Displays)
				}
				checkImage(t, c.Displays[1].Image)
			}
			if f.Type == "turn.completed" {
				break
			}
		}
		if strings.Join(order, " ") != "output display display" || len(items) != 2 {
			t.Fatalf("events %v items %+v", order, items)
		}
		if items[0].HTML == "" || items[0].Index != 0 || items[1].Image == nil || items[1].Image.Width != 12 {
			t.Errorf("streamed items %+v", items)
		}
		tool := lastToolMessage(t, alice, conv)
		for _, want := range []string{"HTML shown to the user; its text form: Table(sales=42)", "image shown to the user (display-1.png, 12×8)"} {
			if !strings.Contains(tool, want) {
				t.Errorf("model context lacks %q:\n%s", want, tool)
			}
		}
		if strings.Contains(tool, "iVBOR") || strings.Contains(tool, "<table>") {
			t.Errorf("model context carries the bytes:\n%s", tool)
		}
	})

	t.Run("failing cell's traceback reaches the model", func(t *testing.T) {
		status, _ := alice.say(conv, "Run:\n"+py("def ratio(a, b):\n    return a / b\n\nratio(3, 0)"))
		if status != "completed" {
			t.Fatalf("turn %s", status)
		}
		tool := lastToolMessage(t, alice, conv)
		var r struct {
			Status string
			Error  struct{ Type, Message, Traceback string }
		}
		if err := json.Unmarshal([]byte(tool), &r); err != nil {
			t.Fatal(err)
		}
		tb := r.Error.Traceback
		if r.Status != "error" || r.Error.Type != "ZeroDivisionError" || !strings.Contains(tb, "line 2, in ratio") ||
			!strings.Contains(tb, "return a / b") || !strings.Contains(tb, "line 4") {
			t.Fatalf("model context of a failing cell:\n%s", tool)
		}
		if strings.Contains(tb, "/pyodide/") || strings.Contains(tb, "_pyodide") {
			t.Errorf("internal frames in the traceback:\n%s", tb)
		}
	})
}

func lastToolMessage(t *testing.T, c *client, conv int64) string {
	t.Helper()
	var msgs []messageJSON
	c.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), nil, &msgs)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "tool" {
			return msgs[i].Content
		}
	}
	t.Fatal("no tool message")
	return ""
}
