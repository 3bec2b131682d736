// Package proc is the process side of the sandbox engine: one confined operating-system
// process per session (or warm spare), and the engine's end of the frame protocol it
// speaks. Nothing here knows of sessions, stores or runs' results: the engine
// (package sandbox) decides what a process is for.
//
// The files, one job each:
//   - jail.go: the command of a session process and its confinement (bubblewrap, its
//     namespaces and mounts, Deno's permissions); Spec is what it is made from.
//   - cgroup.go: a control group per process (memory and task caps, freezer, kill), on
//     cgroup v1 and v2.
//   - rlimits.go: a process without a cgroup (where none can be written): a uid of its
//     own per process, its rlimits, nice and oom_score_adj; its tasks found by the tree
//     and by the uid. gate.go: the server's binary started again as sandchat-gate, which
//     sets them (and page merging) and drops to the session's uid before bubblewrap.
//   - limits.go: the memory and CPUs the server may use (its cgroup's limits, or the
//     host's), which the engine sizes itself from.
//   - codecache.go: Deno's compiled code, filled once and mounted read-only by every
//     process; runtimefiles.go: the runtime's sources, and of those what the Worker
//     runs (the base snapshot's build id), found rather than listed.
//   - process.go: Process (start, freeze between runs, thaw, kill, close, what it holds
//     in memory) and Launcher, which starts one; console.go keeps the tail of its
//     stdout and stderr for the logs.
//   - protocol.go: the frames and typed messages (requests, replies, their checks),
//     held against the runtime's protocol.ts by protocol_test.go (which also
//     type-checks the runtime: its control thread and Worker share messages.ts).
//   - call.go: the reader of a process's frames, and Call: one request, one reply, a
//     deadline.
//   - run.go: one run (time limit, interrupt, grace, the hooks its output, displays and
//     micropip requests go to).
//
// Locks: a Process guards its call in flight, its hooks and its freezer state with mu,
// its writes with wmu, and serialises calls with callMu (see the fields); its console
// log has a lock of its own.
package proc
