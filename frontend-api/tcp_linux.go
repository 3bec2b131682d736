package frontendapi

import (
	"net"

	"golang.org/x/sys/unix"
)

// unsent is how many bytes written to conn the kernel has not sent yet, most often
// because the peer's window is closed: its application stopped reading. Linux grows a
// socket's send buffer to megabytes, so a client can fall that far behind without a
// single write blocking.
func unsent(conn net.Conn) int {
	tc := tcpConn(conn)
	if tc == nil {
		return 0
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = raw.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQNSD)
	})
	return n
}
