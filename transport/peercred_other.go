//go:build !linux && !darwin && !freebsd

package transport

import "net"

// PeerUID is not implemented on this system: it always fails, so callers
// that require it refuse the connection.
func PeerUID(c net.Conn) (uint32, error) {
	if _, err := unixRawConn(c); err != nil {
		return 0, err
	}
	return 0, ErrNoPeerCred
}
