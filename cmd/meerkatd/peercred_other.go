//go:build !linux

package main

import "net"

// peerUID is not available here: all local connections share one source.
func peerUID(net.Conn) (string, bool) { return "", false }
