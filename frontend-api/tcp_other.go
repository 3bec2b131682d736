//go:build !linux

package frontendapi

import "net"

// unsent is unknown here: only the queue and the write deadline bound a slow client.
func unsent(net.Conn) int { return 0 }
