package session

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sandchat/sandchat"
)

// TestDisplaysFold: what the engine keeps of a run's display frames is what the run
// shows at its end. An update redraws the items of its id in place (where and as what
// they were shown); an id no item has changes nothing; a clear takes away the items and
// the output before it (finish cuts stdout, stderr and their order), at once or, waiting,
// with the next output or item, and never if nothing comes; items after a clear count
// against the bounds afresh; the caller hears of each as it comes, within a bound.
func TestDisplaysFold(t *testing.T) {
	t.Parallel()
	html := func(s string) string {
		return `{"data": {"text/html": "` + s + `", "text/plain": "t"}, "metadata": {}}`
	}
	withID := func(s, id string) string {
		return `{"data": {"text/html": "` + s + `", "text/plain": "t"}, "metadata": {}, "transient": {"display_id": "` + id + `"}}`
	}
	var told []string
	c := &displays{max: 2, maxBytes: 1 << 20, maxImage: 1 << 20, on: func(d sandchat.Display) { told = append(told, d.Kind+":"+d.ID+d.HTML) }}
	must := func(kind, item string) {
		t.Helper()
		if err := c.add(kind, item); err != nil {
			t.Fatalf("%s %s: %v", kind, item, err)
		}
	}
	c.wrote("stdout", len("old\n"))
	must("display", html("gone"))
	must("clear", `{"wait": true}`)
	c.wrote("stdout", len("new\n")) // applies the clear
	must("display", withID("0%", "bar"))
	must("update", withID("50%", "bar"))
	must("update", withID("nowhere", "other"))
	must("display", html("second"))
	must("display", html("over the count")) // two items at most
	c.wrote("stderr", len("warn\n"))
	must("clear", `{"wait": true}`) // nothing follows it
	res := Result{RunOutcome: sandchat.RunOutcome{Stdout: "old\nnew\n", Stderr: "notes\nwarn\n",
		Order: []sandchat.OutputAt{{Stderr: 6}, {Stdout: 8, Stderr: 6}}}}
	c.finish(&res, len("notes\n"), 0)
	if got := strings.Join(told, " "); got != "display:gone clear: display:bar0% update:bar50% display:second" {
		t.Errorf("told %s", got)
	}
	if res.Stdout != "new\n" || res.Stderr != "notes\nwarn\n[sandbox] 1 display items not shown: over the limit of 2 items or 1048576 bytes per run\n" {
		t.Errorf("output %q, stderr %q", res.Stdout, res.Stderr)
	}
	if len(res.Displays) != 2 || res.Displays[0].HTML != "50%" || res.Displays[0].ID != "bar" || res.Displays[0].Kind != sandchat.DisplayItem ||
		*res.Displays[0].At != (sandchat.OutputAt{Stdout: 4, Stderr: 6}) || res.Displays[1].HTML != "second" {
		t.Errorf("displays %+v", res.Displays)
	}
	if fmt.Sprint(res.Order) != fmt.Sprint([]sandchat.OutputAt{{Stderr: 6}, {Stdout: 4, Stderr: 6}}) {
		t.Errorf("order %+v", res.Order)
	}
	for _, bad := range []struct{ kind, item string }{{"update", html("no id")}, {"clear", "not json"}, {"refresh", html("x")}} {
		if err := c.add(bad.kind, bad.item); err == nil {
			t.Errorf("%s %s was taken", bad.kind, bad.item)
		}
	}
}
