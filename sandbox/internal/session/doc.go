// Package session is one Python session of a node: its process, its state, its lock
// and its checkpoint timer, and the verbs of its life. The node (package sandbox) keeps
// the map of sessions and decides which to let go of; everything else a session does is
// here.
//
// Its life is a state machine (session.go), each verb moving it under its own lock:
//
//	opening → running        Open brings it into a process for the run that asked for it
//	idle ⇄ running           Open takes a warm one for a run; Run leaves it idle
//	idle ⇄ checkpointing     Checkpoint saves its heap off the runs' path, under the lease
//	idle → retiring → gone   Evict, then Retire: its last checkpoint, then its process stops
//	                         (at shutdown Retire takes it from any phase)
//	any → gone               a run drops it (its process failed, or its state moved on)
//
// A retiring session is waited for by the next run of its key, which then restores from
// the heap it saved; Reset forgets a session's state in the store and stops it.
//
// The files: session.go, the session and its phases; open.go, Open and Reset (from the
// node's warm copy, the store's heap, its cells, or the caller's history: history.go);
// run.go, Run and its save; recover.go, what follows an interpreter that failed;
// checkpoint.go, Checkpoint and Retire; data.go, a run's files under /data, asked of its
// caller under the lease. What a run returns and streams is shaped by results.go
// (runoutput.go, display.go); heapstream.go moves a heap between a process and the
// store; pip.go answers a run's micropip requests; preload.go checks a request's
// preload; trace.go makes the spans of its steps (restore, execute, checkpoint). What
// the node hands a session (Env: its limits, the node's processes, the store, the
// package fetcher, the observer, the tracer) comes in as small interfaces (env.go).
package session
