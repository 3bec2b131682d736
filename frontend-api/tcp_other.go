//go:build !linux

package frontendapi

import "net"

// unsent is unknown here: only the queue and the write deadline bound a slow client.
func unsent(net.Conn) int { return 0 }

// inFlight is unknown here: a stalled reader is caught by the queue bound and the write
// deadline only.
func inFlight(net.Conn) (pending int, acked uint64, ok bool) { return 0, 0, false }

// hungUp is unknown here: a request runs to its end.
func hungUp(net.Conn) bool { return false }
