package testenv

import "syscall"

// ReceiveBuffer is a net.Dialer Control that gives the socket a receive buffer of size
// bytes: a test client that then stops reading stalls its server at once, instead of
// after the megabytes Linux would otherwise let it buffer.
func ReceiveBuffer(size int) func(network, address string, rc syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
		}); cerr != nil {
			return cerr
		}
		return err
	}
}
