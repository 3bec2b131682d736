package sandbox

import (
	"context"
	"fmt"
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
