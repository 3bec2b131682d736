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

// inFlight is what conn has written that the peer's kernel has not acknowledged yet
// (unsent bytes included), and how many bytes it has acknowledged so far; ok is false
// where the kernel does not say.
func inFlight(conn net.Conn) (pending int, acked uint64, ok bool) {
	tc := tcpConn(conn)
	if tc == nil {
		return 0, 0, false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	_ = raw.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		if pending, err = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err != nil {
			return
		}
		if info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err != nil {
			return
		}
		acked, ok = info.Bytes_acked, true
	})
	return pending, acked, ok
}
