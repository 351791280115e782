package main

import (
	"net"
	"strconv"
	"syscall"
)

// peerUID returns the user id of the process at the other end of a Unix
// socket connection.
func peerUID(c net.Conn) (string, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return "", false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return "", false
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return "", false
	}
	return strconv.FormatUint(uint64(cred.Uid), 10), true
}
