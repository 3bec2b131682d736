// Package sandbox runs Python for the assistant: Pyodide (CPython in WebAssembly) hosted
// by Deno, one operating-system process per live session, confined by bubblewrap and a
// cgroup of its own, with each session's interpreter state made durable after every
// successful run (Redis, with a cold tier in Postgres) so any node can pick it up.
//
// This comment is the package's map; docs/sandbox.md tells how the engine works and
// what it costs, and links here instead of listing files.
//
// The package is the node's policy; a session's own life is internal/session's. A run
// (Execute, run.go) is checked, admitted (its user's share of the node), held under its
// session's lease, and run in the session as session.Open finds it warm or brings it
// back; the session then runs it, makes it durable and saves its heap off the runs'
// path. Each part below is built on those it uses, in that order, and none reaches back.
//
// The files, one job each:
//   - engine.go: Engine: start, status, stop; types.go: the public types (the run's are
//     internal/session's); config.go: Config, its defaults and checks (it embeds the
//     package settings, described once in internal/pkgs' Settings); observe.go: the
//     Observer, told of runs, restores, checkpoints, process starts, the kernel's kills
//     and resets, for metrics.
//   - run.go: Execute, check → admit → lease → Open → Run; durable.go: a session's saved
//     state as callers see it, and its reset; forget.go: a session deleted for good with
//     its conversation.
//   - admission.go: the node's bound on session processes and each user's share of it
//     (over the fair gates of internal/admit); procs.go: nodeProcs, processes started
//     within that bound, and processes, what sessions ask for (session.Processes), from
//     the warm pool (pool.go) first; base.go finds or boots the base snapshot, per
//     runtime build (version.go); basepack.go is the base as processes read it (a file of
//     the engine's without its zero pages, with its blocks' hashes).
//   - lease.go: one run of a session at a time across nodes, and this node's queue per
//     session; sessions.go: the map of this node's sessions, the latest of each key in
//     whatever phase, and their eviction; residency.go: which sessions keep a process
//     (adopted when brought back, evicted past MaxLive, IdleTimeout or for a run that
//     waits for a slot).
//   - store.go: the Store the engine consumes (redisstore: state, leases and base
//     snapshots in Redis, the hot copy, bounded per session; pgcold: the cold tier for
//     heaps and larger files; internal/state: the types both share); history.go: the runs
//     on record outside the engine, for a session the store lost.
//   - inspect.go; preflight.go: the findings sandchat doctor prints; available.go: the
//     packages an import can load; bench.go and bench_load.go: sandchat bench's figures,
//     measured through the engine's own methods on the configuration it is given.
//
// Beneath it: internal/session is one session, its life and what a run returns (see its
// package comment); internal/proc is the process side (bubblewrap, cgroups, the frame
// protocol, one run's time limit and grace); internal/pkgs the packages (fetcher and
// cache, index resolver, PEP 440 versions, PEP 508 requirements, wheel tags, imports as
// Python reads them; pkgstest builds and serves the tests' wheels); internal/admit the
// fair gate; sandboxtest a display fixture shared by tests. runtime/ holds what runs in a
// session process: host.ts (its control thread), worker/ (the Worker with Pyodide, one
// module per job), messages.ts (their messages), protocol.ts, the Python driver
// (display.py, driver.py) and the pinned package.json and lock; its README is its map.
//
// Locks: each type guards its own state with a mutex whose comment says what it guards
// (a session its own fields and phase; sessions.mu only the map; keyLocks.mu this node's
// queue per session; nodeProcs.mu, pool.mu, residency.mu, basepack's, the
// availability's); sessions.mu may be held while a session's lock is taken, never the
// other way round; helpers that need a lock held end in Locked.
package sandbox
