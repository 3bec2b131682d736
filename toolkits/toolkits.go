// Package toolkits owns the catalogue of internal tools and the rule that decides whether
// a tool is on for an agent in a conversation.
package toolkits

import (
	"fmt"
	"sort"
	"strings"
)

// Tool ids. They are stored in Postgres and sent to models; never rename one.
const (
	PyodideSandbox = "pyodide_sandbox"
	SwarmMode      = "swarm_mode"
	DataAnalysis   = "data_analysis"
)

// Tool is one entry of the catalogue as clients see it.
type Tool struct {
	ID                string `json:"id"`
	Name              string `json:"name"`
	Description       string `json:"description"`
	Featured          bool   `json:"featured"`
	Available         bool   `json:"available"`
	UnavailableReason string `json:"unavailable_reason,omitempty"`
}

// Probe reports whether the engine behind a tool can serve it now, and if not, why.
type Probe func() (ok bool, reason string)

// Catalogue is the fixed list of internal tools with the deployment's policy applied.
type Catalogue struct {
	tools    []Tool
	probes   map[string]Probe
	disabled map[string]bool
	// defaults are the tools the deployment has on where neither the conversation nor
	// its agent says; every other tool is off there.
	defaults map[string]bool
}

// NewCatalogue returns the catalogue. probes tell, per tool id, whether its engine runs;
// a tool with no probe is reported unavailable as not yet built, so it is never offered
// by accident. disabled lists tools the deployment switched off.
func NewCatalogue(probes map[string]Probe, disabled []string) *Catalogue {
	c := &Catalogue{
		tools: []Tool{
			{ID: PyodideSandbox, Name: "Python sandbox", Featured: true,
				Description: "Runs Python (Pyodide) for the assistant; variables, imports and files persist across the turns of a conversation."},
			{ID: SwarmMode, Name: "Swarm mode",
				Description: "Lets the agent hand work to its child agents, which share the conversation and its Python session."},
			{ID: DataAnalysis, Name: "Data analysis",
				Description: "Lets the assistant read the conversation's CSV, JSON Lines and Excel attachments: each column's type and statistics, and any rows, without running code. With Python sandbox on too, it says how to load each file there."},
		},
		probes:   probes,
		disabled: map[string]bool{},
		defaults: map[string]bool{},
	}
	for _, id := range disabled {
		c.disabled[id] = true
	}
	return c
}

// DefaultOn makes the tools ids on by default: in a conversation that does not set them
// whose agent (if any) has no setting for them either. It is part of building the
// catalogue, before it serves. Unknown ids are the caller's bug, reported as an error.
func (c *Catalogue) DefaultOn(ids ...string) error {
	for _, id := range ids {
		if !c.Has(id) {
			return fmt.Errorf("toolkits: %q is not an internal tool", id)
		}
		c.defaults[id] = true
	}
	return nil
}

// Has reports whether id names a catalogue tool.
func (c *Catalogue) Has(id string) bool {
	for _, t := range c.tools {
		if t.ID == id {
			return true
		}
	}
	return false
}

// List returns the tools, featured first, with their availability now.
func (c *Catalogue) List() []Tool {
	out := make([]Tool, len(c.tools))
	for i, t := range c.tools {
		t.Available, t.UnavailableReason = c.availability(t.ID)
		out[i] = t
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Featured && !out[j].Featured })
	return out
}

// Available reports whether a tool can be used now, and if not, why.
func (c *Catalogue) Available(id string) (bool, string) { return c.availability(id) }

func (c *Catalogue) availability(id string) (bool, string) {
	if c.disabled[id] {
		return false, "Disabled by the deployment's policy (SANDCHAT_TOOLS_DISABLED)."
	}
	probe, ok := c.probes[id]
	if !ok {
		return false, "Not available in this version of the server."
	}
	return probe()
}

// Sources of a tool's effective state, from strongest to weakest.
const (
	SourcePolicy       = "policy"
	SourceConversation = "conversation"
	SourceAgent        = "agent"
	SourceDefault      = "default"
)

// State is a tool's effective setting for one agent in one conversation.
type State struct {
	Tool
	Enabled bool   `json:"enabled"`
	Source  string `json:"source"`
	// Override is the conversation's own setting: nil means it inherits.
	Override *bool `json:"override"`
	// AgentSetting is the agent's saved setting: nil when the agent has none.
	AgentSetting *bool `json:"agent_setting"`
}

// Resolve applies, for every catalogue tool: the deployment policy, then the
// conversation's override, then the agent's saved setting, then the deployment's
// default (off unless DefaultOn named the tool). It is the one place that order lives.
// overrides only apply to the conversation's primary agent; callers resolving for a
// swarm child pass nil.
func (c *Catalogue) Resolve(overrides, agent map[string]bool) []State {
	tools := c.List()
	out := make([]State, 0, len(tools))
	for _, t := range tools {
		s := State{Tool: t, Source: SourceDefault, Enabled: c.defaults[t.ID]}
		if v, ok := overrides[t.ID]; ok {
			s.Override = &v
		}
		if v, ok := agent[t.ID]; ok {
			s.AgentSetting = &v
		}
		switch {
		case !t.Available:
			s.Enabled, s.Source = false, SourcePolicy
		case s.Override != nil:
			s.Enabled, s.Source = *s.Override, SourceConversation
		case s.AgentSetting != nil:
			s.Enabled, s.Source = *s.AgentSetting, SourceAgent
		}
		out = append(out, s)
	}
	return out
}

// ResolveChild is Resolve for a swarm child: the conversation's explicit off is the
// user's veto for every agent in the conversation, while its on applies to the primary
// agent only, so without a veto each child keeps its own saved setting.
func (c *Catalogue) ResolveChild(overrides, child map[string]bool) []State {
	vetoes := map[string]bool{}
	for id, on := range overrides {
		if !on {
			vetoes[id] = false
		}
	}
	return c.Resolve(vetoes, child)
}

// OffReasons says, for each tool that is off in states, why, in words a model can pass
// on to the user: where the setting that switched it off lives. child tells that states
// are a swarm child's, whom the toolbar's "on" does not reach.
func OffReasons(states []State, agentName string, child bool) map[string]string {
	out := map[string]string{}
	for _, s := range states {
		switch {
		case s.Enabled:
		case s.Source == SourcePolicy:
			out[s.ID] = "it is unavailable: " + s.UnavailableReason
		case s.Source == SourceConversation:
			out[s.ID] = "it is switched off for this conversation in the chat toolbar (Internal tools → " + s.Name + ")"
		case child:
			out[s.ID] = "the agent " + agentName + "'s own setting for it is off (Agents → " + agentName + " → Configuration → TOOLKITS)"
		default:
			out[s.ID] = "it is off for this conversation; switch it on in the chat toolbar (Internal tools → " + s.Name + ")"
		}
	}
	return out
}

// OffNote is what a model is told about the tools it was not given in a turn, so it
// neither claims them nor leaves the user without the way to switch them on. off is
// OffReasons'; the note is empty when every tool is on.
func OffNote(off map[string]string) string {
	if len(off) == 0 {
		return ""
	}
	names := map[string]string{}
	for _, t := range NewCatalogue(nil, nil).tools {
		names[t.ID] = t.Name
	}
	ids := make([]string, 0, len(off))
	for id := range off {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	b.WriteString("These internal tools are off for you in this turn; you cannot use them, so never say or imply that you can (")
	b.WriteString("when the user asks for one, say that it is off and where it is switched on):")
	for _, id := range ids {
		name := names[id]
		if name == "" {
			name = id
		}
		fmt.Fprintf(&b, "\n- %s: %s.", name, off[id])
	}
	return b.String()
}

// Enabled returns the ids of the tools that are on in states.
func Enabled(states []State) map[string]bool {
	on := map[string]bool{}
	for _, s := range states {
		if s.Enabled {
			on[s.ID] = true
		}
	}
	return on
}
