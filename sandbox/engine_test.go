package sandbox

import (
	"strings"
	"testing"
)

func TestExecuteBasics(t *testing.T) {
	e, _, key := setup(t)
	k := key("basics")
	r := mustSucceed(t, e, k, "x = 41\nprint('hi')\nx + 1")
	if resultOf(r) != "42" || r.Stdout != "hi\n" {
		t.Fatalf("got %+v", r)
	}
	r = mustSucceed(t, e, k, "x += 1\nx")
	if resultOf(r) != "42" {
		t.Fatalf("got %+v", r)
	}
	t.Logf("%+v", r.Session)
	r = run(t, e, k, "def f():\n    return 1/0\nf()")
	if r.Status != StatusError || !strings.Contains(r.Error.Traceback, "ZeroDivisionError") {
		t.Fatalf("got %+v", r)
	}
	t.Log(r.Error.Traceback)
}
