package sandbox

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

func TestDisplay(t *testing.T) {
	e, _, key := setup(t)
	k := key("display")
	mustSucceed(t, e, k, sandboxtest.RichDisplay)

	var mu sync.Mutex
	var events []string
	var streamed []sandchat.Display
	req := Request{
		Code: "print('before')\ndisplay(Table())\nprint('between')\ndisplay(Picture())\n" +
			"from IPython.display import Markdown\ndisplay(Markdown('**bold**'))\nTable()",
		OnOutput: func(stream, chunk string) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, "out:"+strings.TrimSpace(chunk))
		},
		OnDisplay: func(d sandchat.Display) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, "display:"+d.Kind)
			streamed = append(streamed, d)
		},
	}
	res, err := e.Execute(context.Background(), k, req)
	if err != nil || res.Status != StatusSuccess {
		t.Fatalf("Execute: %v %+v", err, res.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "out:before display:display out:between display:display display:display display:result"
	if got := strings.Join(events, " "); got != want {
		t.Errorf("stream order:\n got %s\nwant %s", got, want)
	}
	if len(res.Displays) != 4 || len(streamed) != 4 {
		t.Fatalf("%d displays in the result, %d streamed: %+v", len(res.Displays), len(streamed), res.Displays)
	}
	html, pic, md, result := res.Displays[0], res.Displays[1], res.Displays[2], res.Displays[3]
	if html.HTML != "<table><tr><td>sales</td><td>42</td></tr></table>" || html.Text != "Table(sales=42)" {
		t.Errorf("html item %+v", html)
	}
	if pic.Image == nil || pic.Image.Width != 12 || pic.Image.Height != 8 || pic.Image.ContentType != "image/png" ||
		pic.Image.Name != "display-1.png" || int64(len(pic.Image.Data)) != pic.Image.Size {
		t.Errorf("image item %+v", pic.Image)
	}
	if md.Markdown != "**bold**" {
		t.Errorf("markdown item %+v", md)
	}
	if result.Kind != "result" || result.HTML == "" || resultOf(res) != "Table(sales=42)" {
		t.Errorf("trailing expression: item %+v, result %s", result, resultOf(res))
	}
	if info := checkpointNow(t, e, k); info.Mode != modeSnapshot {
		t.Errorf("display() must not stop the heap from being saved: mode %q", info.Mode)
	}

	t.Run("an Image's size and a bundle's text as the result", func(t *testing.T) {
		r := mustSucceed(t, e, k, "from IPython.display import Image\ndisplay(Image(data=make_png(1, 1), width=300, height=200))\n"+
			"class Fig:\n    def _repr_mimebundle_(self, include=None, exclude=None):\n        return {'text/html': '<b>fig</b>', 'text/plain': 'Fig(3 bars)'}\nFig()")
		if len(r.Displays) != 2 || r.Displays[0].Image == nil || r.Displays[0].Image.DrawWidth != 300 || r.Displays[0].Image.DrawHeight != 200 || r.Displays[0].Image.Width != 1 {
			t.Errorf("displays %+v, want the 1×1 image drawn at 300×200 first", r.Displays)
		}
		if got := resultOf(r); got != "Fig(3 bars)" {
			t.Errorf("the trailing expression's result is %q, want its bundle's text/plain", got)
		}
	})

	t.Run("files and images are named in their plain form", func(t *testing.T) {
		// A hidden character would let "invoice\u202egnp.py" pass for "invoiceyp.png"
		// wherever the name is shown: the engine names both as they are stored.
		r := mustSucceed(t, e, k, "open('invoice\\u202egnp.py', 'w').write('1')\n"+
			"display(Picture(), metadata={'filename': 'chart\\u202egnp.png'})")
		if len(r.Artifacts) != 1 || r.Artifacts[0].Name != "invoice_U+202E_gnp.py" {
			t.Errorf("artifacts %+v, want invoice_U+202E_gnp.py", r.Artifacts)
		}
		if len(r.Displays) != 1 || r.Displays[0].Image == nil || r.Displays[0].Image.Name != "chart_U+202E_gnp.png" {
			t.Errorf("displays %+v, want an image named chart_U+202E_gnp.png", r.Displays)
		}
		// Two files whose names have one plain form are two files, each with a name.
		r = mustSucceed(t, e, k, "open('caf\\u00e9.csv', 'w').write('1')\nopen('cafe\\u0301.csv', 'w').write('2')")
		var names []string
		for _, a := range r.Artifacts {
			names = append(names, a.Name)
		}
		if strings.Join(names, " ") != "caf\u00e9-2.csv caf\u00e9.csv" {
			t.Errorf("artifacts %q, want caf\u00e9.csv and caf\u00e9-2.csv", names)
		}
	})
	t.Run("clear_output and display handles shape what the run shows", func(t *testing.T) {
		var mu sync.Mutex
		var told []string
		req := Request{
			Code: "from IPython.display import display, clear_output, update_display, HTML, Math\nimport sys\n" +
				"print('old line')\ndisplay(HTML('<i>old</i>'))\n" +
				"for i in range(3):\n    clear_output(wait=True)\n    print('step', i)\n" +
				"h = display(HTML('<b>0%</b>'), display_id=True)\nh.update(HTML('<b>100%</b>'))\n" +
				"update_display(HTML('nowhere'), display_id='no such item')\n" +
				"display(Math('x^2'))\nprint('err', file=sys.stderr)\nclear_output(wait=True)\nh.display_id",
			OnDisplay: func(d sandchat.Display) {
				mu.Lock()
				defer mu.Unlock()
				told = append(told, d.Kind)
			},
		}
		r, err := e.Execute(context.Background(), k, req)
		if err != nil || r.Status != StatusSuccess {
			t.Fatalf("Execute: %v %+v", err, r.Error)
		}
		mu.Lock()
		defer mu.Unlock()
		if got := strings.Join(told, " "); got != "display clear clear clear display update display" {
			t.Errorf("told while it ran: %s", got)
		}
		// What the run shows at its end, as a notebook keeps it: the last step, the item
		// as updated, the equation; the clear that nothing followed never applied.
		if r.Stdout != "step 2\n" || r.Stderr != "err\n" {
			t.Errorf("output %q, stderr %q", r.Stdout, r.Stderr)
		}
		id := strings.Trim(resultOf(r), "'")
		if len(r.Displays) != 2 || r.Displays[0].HTML != "<b>100%</b>" || r.Displays[0].ID != id || r.Displays[0].Kind != sandchat.DisplayItem ||
			*r.Displays[0].At != (sandchat.OutputAt{Stdout: 7}) || r.Displays[1].LaTeX != `$\displaystyle x^2$` {
			t.Fatalf("displays %+v (handle %q)", r.Displays, id)
		}
		if len(r.Order) != 1 || r.Order[0] != (sandchat.OutputAt{Stdout: 7}) {
			t.Errorf("order %+v, want stderr after the 7 bytes of stdout", r.Order)
		}
		r = mustSucceed(t, e, k, "from IPython.display import clear_output\nprint('gone')\ndisplay(HTML('gone'))\nclear_output()")
		if r.Stdout != "" || len(r.Displays) != 0 {
			t.Errorf("after clear_output(): stdout %q, displays %+v", r.Stdout, r.Displays)
		}
	})
	t.Run("plain values show no display item", func(t *testing.T) {
		r := mustSucceed(t, e, k, "1 + 1")
		if len(r.Displays) != 0 || resultOf(r) != "2" {
			t.Errorf("displays %+v result %s", r.Displays, resultOf(r))
		}
	})
	t.Run("over the count limit is dropped with a note", func(t *testing.T) {
		r := mustSucceed(t, e, k, "for i in range(60): display(i)")
		if len(r.Displays) != e.Config().MaxDisplays || !strings.Contains(r.Stderr, "10 display items not shown") {
			t.Errorf("%d displays, stderr %q", len(r.Displays), r.Stderr)
		}
	})
	t.Run("a forged display frame kills the process, the session comes back", func(t *testing.T) {
		mustSucceed(t, e, k, "kept = 7")
		for _, code := range []string{
			"import js\njs.sandchatDisplay('display', 'not json')",
			"import js, json, base64\njs.sandchatDisplay('display', json.dumps({'data': {'image/png': base64.b64encode(b'GIF89a nope').decode()}}))",
			"import js\njs.sandchatDisplay('display', '{\"data\": {\"text/html\": 3}}')",
		} {
			r := run(t, e, k, code)
			if r.Status != StatusError || r.Error == nil || r.Error.Type != "SandboxError" {
				t.Errorf("%s: status %s error %+v", code, r.Status, r.Error)
			}
			if got := resultOf(mustSucceed(t, e, k, "kept")); got != "7" {
				t.Errorf("after %s: kept = %s", code, got)
			}
		}
	})
}
