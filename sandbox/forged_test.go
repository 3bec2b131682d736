package sandbox

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestForgedWorkerMessages: user code can post anything to the control thread: huge
// buffers, forged replies, outputs, display items, install requests and failures. Each
// is ignored or ends the process at once (never the run's whole timeout), and the
// session's next run works from its saved state.
func TestForgedWorkerMessages(t *testing.T) {
	e, _, key := setup(t)
	cases := []string{
		"js.postMessage(js.Uint8Array.new(64 << 20))",
		"js.postMessage(js.Object.fromEntries([['op', 'done'], ['stdout', 'x']]))",
		"js.eval(\"postMessage({op: 'out', stream: 'stdout', chunk: 'x'.repeat(64 << 20)})\")",
		"js.eval(\"postMessage({op: 'display', kind: 'display', item: 'x'.repeat(64 << 20)})\")",
		"js.eval(\"postMessage({op: 'display', kind: 'display', item: '{' + 'x'.repeat(8 << 20)})\")",
		"js.eval(\"postMessage({op: 'pip', seq: 1, req: 'x'.repeat(64 << 20)})\")",
		"js.eval(\"postMessage({op: 'failed', error: {nested: 'object'}})\")",
		"js.eval(\"postMessage({op: 'checkpointed', header: new Uint8Array(8), delta: null})\")",
	}
	for i, forged := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			k := key(fmt.Sprint(i))
			mustSucceed(t, e, k, "y = 1")
			r, err := e.Execute(context.Background(), k, Request{Code: "import js\n" + forged + "\n'survived'", Timeout: 20 * time.Second})
			if err != nil || r.Status == StatusTimeout {
				t.Fatalf("forged message held the run: %v %s %+v", err, r.Status, r.Error)
			}
			if r.Error != nil && (r.Error.Message == "" || len(r.Error.Message) > 70000) {
				t.Fatalf("error message of %d bytes", len(r.Error.Message))
			}
			if got := resultOf(mustSucceed(t, e, k, "y")); got != "1" {
				t.Fatalf("next run: %s", got)
			}
		})
	}
}

// TestNoCPUAfterTheAnswer: code posts a forged "done" and goes on computing, with the
// run's number (read by a listener an earlier run installed) or without. The forgery is
// never taken for the run's answer: the control thread asks the Worker whether it is
// idle, gets no word from a thread that still computes, and ends the process. The run
// says what was restored, the code gets no more CPU, and the session goes on from its
// saved state.
func TestNoCPUAfterTheAnswer(t *testing.T) {
	e, _, key := setup(t)
	forge := func(run string) string {
		return "import js, time\nforged = True\n" +
			"js.eval(\"postMessage({op: 'done', run: " + run + ", status: 'success', result: null, error: null, stdout: '', stderr: '', " +
			"changed: [], omitted: 0, deleted: [], outside: [], packages: [], timings: {}, displaysDropped: 0})\")\n" +
			"end = time.monotonic() + 20\nwhile time.monotonic() < end:\n    pass"
	}
	for _, tc := range []struct{ name, setup, run string }{
		{"with the run's number", "import js\njs.eval(\"addEventListener('message', (e) => { globalThis.lastRun = e.data?.run })\")", "globalThis.lastRun"},
		{"without it", "pass", "'guess'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := key(tc.name)
			mustSucceed(t, e, k, "y = 1")
			mustSucceed(t, e, k, tc.setup)
			pids := sessionPIDs(t, e, k)
			r, err := e.Execute(context.Background(), k, Request{Code: forge(tc.run), Timeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status == StatusSuccess || r.Error == nil || !strings.Contains(r.Error.Message, "restored to its last saved state") {
				t.Fatalf("the forged answer was taken: %s %+v", r.Status, r.Error)
			}
			// What the session's processes used in the second after the answer.
			before := cpuTicks(pids)
			time.Sleep(time.Second)
			if used := cpuTicks(pids) - before; used > 10 { // clock ticks: 100 ms
				t.Fatalf("the session's process used %d ms of CPU in the second after its answer", used*10)
			}
			r = mustSucceed(t, e, k, "[y, 'forged' in globals()]")
			if resultOf(r) != "[1, False]" {
				t.Fatalf("after the forgery: %s", resultOf(r))
			}
		})
	}
}
