package main

import (
	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox"
)

// SandboxConfig is the Python sandbox part of Config.
type SandboxConfig struct {
	Enabled bool
	// Default is on or off: the Python sandbox's state in conversations where neither
	// the conversation nor its agent sets it.
	Default          string
	PerAgentSessions bool
	// Pip is on or off: whether micropip.install may fetch wheels through the server.
	Pip    string
	Engine sandbox.Config
}

// engine is the field of Config the engine's settings fill.
func engine(c *Config) *sandbox.Config { return &c.Sandbox.Engine }

// sandboxSettings are the SANDCHAT_SANDBOX_* settings: the server's own, then the
// engine's (sandbox.Settings, where each is declared with its default and bounds).
var sandboxSettings = func() []setting {
	all := []setting{
		{Env: "SANDBOX_ENABLED", Flag: "sandbox", Def: "true", Help: "run the Python sandbox engine",
			Value: sandchat.Boolean(func(c *Config) *bool { return &c.Sandbox.Enabled })},
		{Env: "SANDBOX_DEFAULT", Def: "off", Help: "the Python sandbox's state where neither the conversation nor its agent sets it: off (users switch it on from the chat toolbar) or on",
			Value: sandchat.OneOf(func(c *Config) *string { return &c.Sandbox.Default }, "on", "off")},
		{Env: "SANDBOX_PER_AGENT_SESSIONS", Def: "false", Help: "give each agent of a swarm its own Python session instead of the conversation's",
			Value: sandchat.Boolean(func(c *Config) *bool { return &c.Sandbox.PerAgentSessions })},
		{Env: "SANDBOX_PIP", Def: "on", Help: "on: micropip.install fetches pure-Python wheels through the server; off: no installs",
			Value: sandchat.OneOf(func(c *Config) *string { return &c.Sandbox.Pip }, "on", "off")},
	}
	for _, s := range sandbox.Settings() {
		all = append(all, sandchat.Lift(s, engine))
	}
	return all
}()
