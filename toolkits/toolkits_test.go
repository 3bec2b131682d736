package toolkits_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/toolkits"
)

func TestResolve(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestPythonToolSpec: the description tells the model whether micropip can add packages.
func TestPythonToolSpec(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pip       bool
		want, not string
	}{
		{true, "await micropip.install(", "turned off"},
		{false, "Installing other packages is turned off here.", "micropip"},
	} {
		_, desc, _ := toolkits.PythonToolSpec(sandbox.StatusLimits{TimeoutMS: 30000, Pip: tc.pip}, "")
		if !strings.Contains(desc, tc.want) || strings.Contains(desc, tc.not) {
			t.Errorf("pip %v: description lacks %q or has %q:\n%s", tc.pip, tc.want, tc.not, desc)
		}
	}
}

// TestResolveChild: for a swarm child the conversation's off is a veto and its on does
// not apply; otherwise the child's own setting decides, and the reason says which.
func TestResolveChild(t *testing.T) {
	t.Parallel()
	up := func() (bool, string) { return true, "" }
	c := toolkits.NewCatalogue(map[string]toolkits.Probe{toolkits.PyodideSandbox: up}, nil)
	on, off := map[string]bool{"pyodide_sandbox": true}, map[string]bool{"pyodide_sandbox": false}
	cases := []struct {
		name             string
		overrides, child map[string]bool
		enabled          bool
		source, reason   string
	}{
		{"the user's off vetoes a child that has it on", off, on, false, "conversation", "switched off for this conversation in the chat toolbar"},
		{"the user's on does not switch a child on", on, off, false, "agent", "the agent kid's own setting for it is off"},
		{"no override: the child's own on", nil, on, true, "agent", ""},
		{"no setting at all", nil, nil, false, "default", "the agent kid's own setting for it is off"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			states := c.ResolveChild(tc.overrides, tc.child)
			if s := states[0]; s.ID != toolkits.PyodideSandbox || s.Enabled != tc.enabled || s.Source != tc.source {
				t.Fatalf("got %+v, want enabled=%v source=%s", s, tc.enabled, tc.source)
			}
			why := toolkits.OffReasons(states, "kid", true)[toolkits.PyodideSandbox]
			if tc.reason == "" && why != "" || !strings.Contains(why, tc.reason) {
				t.Fatalf("reason %q, want it to say %q", why, tc.reason)
			}
		})
	}
	if why := toolkits.OffReasons(c.Resolve(nil, nil), "lead", false)[toolkits.PyodideSandbox]; !strings.Contains(why, "switch it on in the chat toolbar") {
		t.Fatalf("the primary agent's reason: %q", why)
	}
}

// TestResolveDeploymentDefault: a deployment that has the sandbox on by default has it
// on only where neither the conversation nor its agent says otherwise, and never past
// its own policy; the source stays "default", so a client can say where it comes from.
func TestResolveDeploymentDefault(t *testing.T) {
	t.Parallel()
	up := func() (bool, string) { return true, "" }
	down := func() (bool, string) { return false, "Deno is not installed." }
	on, off := map[string]bool{"pyodide_sandbox": true}, map[string]bool{"pyodide_sandbox": false}
	cases := []struct {
		name             string
		probe            toolkits.Probe
		disabled         []string
		overrides, agent map[string]bool
		child            bool
		enabled          bool
		source           string
	}{
		{"no setting anywhere: on", up, nil, nil, nil, false, true, "default"},
		{"the agent's off wins", up, nil, nil, off, false, false, "agent"},
		{"the conversation's off wins", up, nil, off, on, false, false, "conversation"},
		{"the engine down still wins", down, nil, nil, nil, false, false, "policy"},
		{"the deployment's switch-off still wins", up, []string{"pyodide_sandbox"}, nil, nil, false, false, "policy"},
		{"a child with no setting: on", up, nil, nil, nil, true, true, "default"},
		{"the user's off vetoes a child", up, nil, off, nil, true, false, "conversation"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := toolkits.NewCatalogue(map[string]toolkits.Probe{toolkits.PyodideSandbox: tc.probe}, tc.disabled)
			if err := c.DefaultOn(toolkits.PyodideSandbox); err != nil {
				t.Fatal(err)
			}
			states := c.Resolve(tc.overrides, tc.agent)
			if tc.child {
				states = c.ResolveChild(tc.overrides, tc.agent)
			}
			if s := states[0]; s.ID != toolkits.PyodideSandbox || s.Enabled != tc.enabled || s.Source != tc.source {
				t.Fatalf("got %+v, want enabled=%v source=%s", s, tc.enabled, tc.source)
			}
			if states[1].Enabled {
				t.Fatalf("swarm mode on without being asked for: %+v", states[1])
			}
		})
	}
	if err := toolkits.NewCatalogue(nil, nil).DefaultOn("pyodide"); err == nil {
		t.Fatal("an unknown tool id was accepted as a default")
	}
}

// TestEveryToolResolvesAlike: the catalogue has no tool of its own kind: each one, the
// data analysis tool included, is off by default and follows the same order of sources
// and the user's veto over a swarm child.
func TestEveryToolResolvesAlike(t *testing.T) {
	t.Parallel()
	up := func() (bool, string) { return true, "" }
	ids := []string{toolkits.PyodideSandbox, toolkits.SwarmMode, toolkits.DataAnalysis}
	probes := map[string]toolkits.Probe{}
	for _, id := range ids {
		probes[id] = up
	}
	c := toolkits.NewCatalogue(probes, nil)
	if len(c.List()) != len(ids) {
		t.Fatalf("catalogue %+v, want %v", c.List(), ids)
	}
	for _, id := range ids {
		on, off := map[string]bool{id: true}, map[string]bool{id: false}
		for _, tc := range []struct {
			name             string
			overrides, agent map[string]bool
			child            bool
			enabled          bool
			source           string
		}{
			{"default", nil, nil, false, false, "default"},
			{"agent on", nil, on, false, true, "agent"},
			{"conversation off beats agent on", off, on, false, false, "conversation"},
			{"conversation on beats agent off", on, off, false, true, "conversation"},
			{"the user's off vetoes a child", off, on, true, false, "conversation"},
			{"the user's on does not reach a child", on, nil, true, false, "default"},
		} {
			states := c.Resolve(tc.overrides, tc.agent)
			if tc.child {
				states = c.ResolveChild(tc.overrides, tc.agent)
			}
			for _, s := range states {
				if s.ID == id && (s.Enabled != tc.enabled || s.Source != tc.source) {
					t.Errorf("%s, %s: enabled=%v source=%s, want %v %s", id, tc.name, s.Enabled, s.Source, tc.enabled, tc.source)
				}
			}
		}
	}
	if c := toolkits.NewCatalogue(probes, []string{toolkits.DataAnalysis}); c.Resolve(nil, map[string]bool{toolkits.DataAnalysis: true})[2].Source != "policy" {
		t.Error("the deployment's switch-off does not hold for data_analysis")
	}
}
