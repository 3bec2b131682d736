package frontendapi

import "net"

// tcpConn is the TCP connection under a hijacked one; fasthttp's wrapper hides it.
func tcpConn(conn net.Conn) *net.TCPConn {
	if u, ok := conn.(interface{ UnsafeConn() net.Conn }); ok {
		conn = u.UnsafeConn()
	}
	tc, _ := conn.(*net.TCPConn)
	return tc
}

// abort makes closing conn reset it: the kernel drops what the client never read at
// once, instead of holding it and the socket while it waits for a window that does
// not open.
func abort(conn net.Conn) {
	if tc := tcpConn(conn); tc != nil {
		_ = tc.SetLinger(0)
	}
}
