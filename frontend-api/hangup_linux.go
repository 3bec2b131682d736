package frontendapi

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// hungUp reports whether the client closed conn (or it was reset): a peek that reads
// nothing without blocking finds the end of its stream. Bytes waiting (a pipelined
// request) are not an end.
func hungUp(conn net.Conn) bool {
	tc := tcpConn(conn)
	if tc == nil {
		return false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == nil:
			gone = n == 0
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
		default:
			gone = true // reset, or the socket is no longer usable
		}
	})
	return gone
}
