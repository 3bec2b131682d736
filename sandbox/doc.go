// Package sandbox runs Python for the assistant: Pyodide (CPython in WebAssembly) hosted
// by Deno, one operating-system process per live session, confined by bubblewrap and a
// cgroup of its own, with each session's interpreter state made durable after every
// successful run (Redis, with a cold tier in Postgres) so any node can pick it up.
//
// This comment is the package's map; docs/sandbox.md tells how the engine works and
// what it costs, and links here instead of listing files.
//
// The files, one job each:
//   - engine.go: Engine: start, status, stop; types.go: the public types (request,
//     result, session, status); config.go: Config, its defaults and checks (it embeds
//     the package settings, described once in internal/pkgs' Settings).
//   - procs.go: nodeProcs, processes started within the node's bound (admission.go,
//     over the fair gate of internal/admit), with the warm pool they own (pool.go) and
//     the compiled-code cache they fill; base.go finds or boots the base snapshot, per
//     runtime build (version.go); basepack.go is the base as processes read it (a file
//     of the engine's without its zero pages, with its blocks' hashes; deltas XOR-ed
//     against it).
//   - live.go: one live session, owning its fields, its lock and its checkpoint timer,
//     reached only through its methods; sessions.go: the set of them and of those
//     being retired, only the map under its own lock; residency.go: which sessions keep
//     a process (adopted after a run, evicted past MaxLive, IdleTimeout or for a run
//     that waits for a slot).
//   - lease.go: one run of a session at a time across nodes, and this node's queue per
//     session; attach.go: brings a session back into a process (from the live set, the
//     store's heap, or by replaying its cells; history.go: the runs on record outside
//     the engine, for a session the store lost); recover.go: a session whose run's
//     interpreter failed comes back, reset when its saved state cannot run.
//   - run.go: a run; results.go: what it returns and streams, shaped within the
//     limits (output markers, artifacts); preload.go: a request's preload; runoutput.go:
//     where a run's output and display items go as they come (display.go: the items); pip.go:
//     micropip's requests; pkgview.go: a process's window on the package cache;
//     available.go: the packages an import can load.
//   - durable.go: logs the run and answers for the session's saved state and reset;
//     checkpoint.go: heaps saved off the runs' path; heapstream.go: a heap's way between
//     a process and the store, XOR-ed and compressed as it streams; forget.go: a session deleted for
//     good with its conversation.
//   - store.go: the Store the engine consumes (redisstore: state, leases and base
//     snapshots in Redis, the hot copy, bounded per session; pgcold: the cold tier for
//     heaps and larger files; internal/state: the types both share).
//   - inspect.go; preflight.go: the findings sandchat doctor prints; bench.go and
//     bench_load.go: sandchat bench's figures; observe.go: the Observer, told of runs,
//     restores, checkpoints, process starts, the kernel's kills and resets, for metrics.
//
// Beneath it: internal/proc is the process side (see its package comment: bubblewrap,
// cgroups, the frame protocol, one run's time limit and grace); internal/pkgs the
// packages (fetcher and cache, index resolver, PEP 440 versions, PEP 508 requirements,
// wheel tags, imports as Python reads them; pkgstest builds and serves the tests'
// wheels); internal/admit the fair gate; sandboxtest a display fixture shared by tests.
// runtime/ holds what runs in a session process: host.ts (its control thread), worker/
// (the Worker with Pyodide, one module per job), messages.ts (their messages),
// protocol.ts, the Python driver (display.py, driver.py) and the pinned package.json
// and lock; its README is its map.
//
// Locks: each type guards its own state with a mutex whose comment says what it guards
// (live.mu a session's fields; sessions.mu only the map; keyLocks.mu this node's queue
// per session; nodeProcs.mu, pool.mu, residency.mu, basepack's, the availability's);
// sessions.mu may be held while a live.mu is taken, never the other way round; helpers
// that need a lock held end in Locked.
package sandbox
