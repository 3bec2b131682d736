package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestOutputCap: code that prints 16 MiB, in one piece or line by line, gets the first
// MiB with the truncation marker and its own status, on the REST path and in the
// execution log, from a chat turn too; and so does a run whose interpreter fails after
// printing (here Python posts the failure itself, as it can).
func TestOutputCap(t *testing.T) {
	t.Parallel()
	_, _, conv, alice, _, _ := sandboxParty(t)
	const marker = "\n[... output truncated at 1048576 bytes ...]\n"
	cases := []struct{ name, code, status, first string }{
		{"one print", "print('x' * (16 << 20))", "success", "xxxx"},
		{"many lines", "for i in range(1 << 18):\n    print('%063d' % i)", "success", "000"},
		{"the interpreter fails after printing", "import js\nprint('x' * (16 << 20))\n" +
			"js.eval(\"postMessage({op: 'failed', error: 'the interpreter gave up'})\")\nimport time\ntime.sleep(5)", "error", "xxxx"},
	}
	check := func(t *testing.T, how, status, stdout, wantStatus, first string) {
		t.Helper()
		if status != wantStatus || !strings.HasPrefix(stdout, first) || !strings.HasSuffix(stdout, marker) || len(stdout) != 1<<20+len(marker) {
			t.Fatalf("%s: status %s, stdout of %d bytes ending %q", how, status, len(stdout), stdout[max(0, len(stdout)-60):])
		}
	}
	record := func(t *testing.T, id int64) (status, stdout string) {
		var ex struct{ Status, Stdout string }
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions/%d", conv, id), nil, &ex)
		return ex.Status, ex.Stdout
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := alice.run(conv, tc.code)
			check(t, "answer", r.Status, r.Stdout, tc.status, tc.first)
			status, stdout := record(t, r.ID)
			check(t, "record", status, stdout, tc.status, tc.first)
		})
		t.Run(tc.name+" in a chat turn", func(t *testing.T) {
			alice.finishTurn(conv, alice.post(conv, "Please run this:\n"+py(tc.code)))
			var list []struct{ ID int64 }
			alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), nil, &list)
			var last int64
			for _, ex := range list {
				last = max(last, ex.ID)
			}
			status, stdout := record(t, last)
			check(t, "record", status, stdout, tc.status, tc.first)
		})
	}
}
