package toolkits_test

import (
	"fmt"
	"testing"

	"github.com/sandchat/sandchat/toolkits"
)

func TestResolve(t *testing.T) {
	up := func() (bool, string) { return true, "" }
	down := func() (bool, string) { return false, "Deno is not installed." }
	cases := []struct {
		name      string
		probe     toolkits.Probe
		disabled  []string
		overrides map[string]bool
		agent     map[string]bool
		enabled   bool
		source    string
	}{
		{"default is off", up, nil, nil, nil, false, "default"},
		{"agent on", up, nil, nil, map[string]bool{"pyodide_sandbox": true}, true, "agent"},
		{"conversation off beats agent on", up, nil, map[string]bool{"pyodide_sandbox": false}, map[string]bool{"pyodide_sandbox": true}, false, "conversation"},
		{"conversation on beats agent off", up, nil, map[string]bool{"pyodide_sandbox": true}, map[string]bool{"pyodide_sandbox": false}, true, "conversation"},
		{"engine down beats everything", down, nil, map[string]bool{"pyodide_sandbox": true}, map[string]bool{"pyodide_sandbox": true}, false, "policy"},
		{"deployment switch-off beats everything", up, []string{"pyodide_sandbox"}, map[string]bool{"pyodide_sandbox": true}, nil, false, "policy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := toolkits.NewCatalogue(map[string]toolkits.Probe{toolkits.PyodideSandbox: tc.probe}, tc.disabled)
			states := c.Resolve(tc.overrides, tc.agent)
			if states[0].ID != toolkits.PyodideSandbox {
				t.Fatalf("featured tool not first: %+v", states)
			}
			if states[0].Enabled != tc.enabled || states[0].Source != tc.source {
				t.Fatalf("got enabled=%v source=%s, want %v %s", states[0].Enabled, states[0].Source, tc.enabled, tc.source)
			}
			if states[1].ID != toolkits.SwarmMode || states[1].Available || states[1].UnavailableReason == "" {
				t.Fatalf("a tool without a probe must say why it is unavailable: %+v", states[1])
			}
		})
	}
}

func TestPackagesText(t *testing.T) {
	if got := toolkits.PackagesText(nil); got != " (no other packages are installed)" {
		t.Fatal(got)
	}
	if got := toolkits.PackagesText([]string{"tinyfmt"}); got != ", plus tinyfmt" {
		t.Fatal(got)
	}
	many := []string{"numpy", "pandas"}
	for i := range 50 {
		many = append(many, fmt.Sprintf("pkg%d", i))
	}
	if got := toolkits.PackagesText(many); got != ", plus 52 packages of the Pyodide distribution (numpy, pandas, …)" {
		t.Fatal(got)
	}
}
