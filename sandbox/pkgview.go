package sandbox

import (
	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// The engine's side of a session process's window on the package cache (internal/pkgs
// owns the cache, the views and the bounds of each load).

// packages opens what one load in p (a run, a restore, the boot) may take from the
// cache; Done ends it. nil without a fetcher.
func (n *nodeProcs) packages(p *proc.Process) *pkgs.Load {
	if n.launch.Fetch == nil || p.View() == nil {
		return nil
	}
	return n.launch.Fetch.Begin(p.View())
}
