package transport

import (
	"net"
	"syscall"
)

// PeerUID returns the user id of the process at the other end of a Unix
// socket connection, from the kernel (SO_PEERCRED): the peer cannot lie
// about it. It fails for any other kind of connection.
func PeerUID(c net.Conn) (uint32, error) {
	raw, err := unixRawConn(c)
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Uid, nil
}
