package sandbox

import (
	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// The engine's side of a session process's window on the package cache (internal/pkgs
// owns the cache, the views and the bounds of each load).

// pkgConfig is what the package fetcher is told of the sandbox's settings.
func (c Config) pkgConfig() pkgs.Config {
	return pkgs.Config{
		PackageDir: c.PackageDir, PackageCDN: c.PackageCDN, PackageCacheDir: c.PackageCacheDir,
		PackageCacheMaxBytes: c.PackageCacheMaxBytes, PackageCacheMaxFiles: c.PackageCacheMaxFiles,
		PackageRunMaxFiles: c.PackageRunMaxFiles, PackageRunMaxBytes: c.PackageRunMaxBytes, PackageRunMaxFetches: c.PackageRunMaxFetches,
		PackageSessionMaxFiles: c.PackageSessionMaxFiles, PackageSessionMaxBytes: c.PackageSessionMaxBytes, PackageSessionMaxFetches: c.PackageSessionMaxFetches,
		PipOff: c.PipOff, PipIndex: c.PipIndex, PipAllow: c.PipAllow, PipHosts: c.PipHosts,
		PipMaxPackages: c.PipMaxPackages, PipMaxBytes: c.PipMaxBytes, PipMaxIndexRequests: c.PipMaxIndexRequests,
	}
}

// packages opens what one load in p (a run, a restore, the boot) may take from the
// cache; Done ends it. nil without a fetcher.
func (n *nodeProcs) packages(p *proc.Process) *pkgs.Load {
	if n.launch.Fetch == nil || p.View() == nil {
		return nil
	}
	return n.launch.Fetch.Begin(p.View())
}
