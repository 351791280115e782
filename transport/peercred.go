package transport

import (
	"errors"
	"net"
	"syscall"
)

// ErrNoPeerCred is returned by PeerUID for a connection whose peer's
// credentials cannot be had: not a Unix socket, or a system without the
// means.
var ErrNoPeerCred = errors.New("transport: peer credentials unavailable")

// unixRawConn returns the raw connection of a Unix socket connection.
func unixRawConn(c net.Conn) (syscall.RawConn, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, ErrNoPeerCred
	}
	return uc.SyscallConn()
}
