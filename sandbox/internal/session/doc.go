// Package session is one Python session of a node: its process, its state, its lock
// and its checkpoint timer, and the steps of its life. A session is brought back into
// a process (open.go: from the node's warm copy, the store's heap, its cells, or the
// caller's history), runs code and makes the run durable (run.go), recovers from an
// interpreter that failed (recover.go), and has its heap saved off the runs' path and
// before its process goes (checkpoint.go). What it is handed by the node (Env: its
// limits, the node's processes, the store, the package fetcher, the node's set of
// sessions) comes in as small interfaces (env.go).
//
// Beside it: results.go shapes what a run returns and streams (runoutput.go, display.go);
// heapstream.go moves a heap between a process and the store; pip.go answers a run's
// micropip requests; preload.go checks a request's preload; history.go picks the runs
// to replay for a session the store lost.
package session
