//go:build darwin || freebsd

package transport

import (
	"net"

	"golang.org/x/sys/unix"
)

// PeerUID returns the user id of the process at the other end of a Unix
// socket connection, from the kernel (LOCAL_PEERCRED): the peer cannot lie
// about it. It fails for any other kind of connection.
func PeerUID(c net.Conn) (uint32, error) {
	raw, err := unixRawConn(c)
	if err != nil {
		return 0, err
	}
	var cred *unix.Xucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Uid, nil
}
