package transport

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// ErrAddrInUse means another live process listens on a Unix socket path.
var ErrAddrInUse = errors.New("transport: another process is listening on this socket")

// staleProbeTimeout bounds the dial that tells a live socket from a stale one.
const staleProbeTimeout = time.Second

// Listen opens a listener on a. For a Unix socket it refuses a path that is
// not a socket (it never removes one) and one where another process is
// listening ([ErrAddrInUse]); a socket file left behind by a dead process is
// replaced. The socket file is created closed to other users (under the
// umask 0077: there is no moment at which another user could connect),
// then made mode 0600, and is removed when the listener closes.
func Listen(ctx context.Context, a Addr) (net.Listener, error) {
	var lc net.ListenConfig
	switch a.Scheme {
	case SchemeTCP, SchemeTLS:
		ln, err := lc.Listen(ctx, TCPNetwork(a.Address()), a.Address())
		if err != nil {
			return nil, fmt.Errorf("transport: listen %s: %w", a, err)
		}
		return ln, nil
	case SchemeUDS:
		return listenUnix(ctx, lc, a, nil)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnsupportedScheme, a.String())
}

// TCPNetwork is the network to listen on address (host:port) with: "tcp4"
// for an IPv4 address, so that 0.0.0.0 means every IPv4 interface and no
// IPv6 one (Go's "tcp" would open a dual-stack socket on [::]), else
// "tcp" ([::] is every interface, a name whatever it resolves to).
func TCPNetwork(address string) string {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return "tcp"
	}
	if ip := net.ParseIP(host); ip != nil && ip.To4() != nil {
		return "tcp4"
	}
	return "tcp"
}

// NotSocket refuses a file at path that is not a socket: a Unix listener
// never removes one to take its path. Nothing there, or a socket, is nil.
func NotSocket(path string) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; move it away or choose another path", path)
	}
	return nil
}

// listenUnix is Listen for a Unix socket; afterBind (tests) runs once the
// socket file exists, before anything else touches it.
func listenUnix(ctx context.Context, lc net.ListenConfig, a Addr, afterBind func(path string)) (net.Listener, error) {
	path := a.Path
	if err := NotSocket(path); err != nil {
		return nil, fmt.Errorf("transport: listen %s: %w", a, err)
	}
	if _, err := os.Lstat(path); err == nil { // a socket: a live listener's, or one left behind
		dctx, cancel := context.WithTimeout(ctx, staleProbeTimeout)
		c, derr := (&net.Dialer{}).DialContext(dctx, "unix", path)
		cancel()
		if derr == nil {
			c.Close()
			return nil, fmt.Errorf("%w: %s", ErrAddrInUse, path)
		}
		// Only a refused connection proves nobody listens. A busy
		// listener (full backlog) or one we may not talk to (another
		// user's socket) is alive: never take its path.
		if !errors.Is(derr, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: %s (probe: %v)", ErrAddrInUse, path, derr)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("transport: remove stale socket %s: %w", path, err)
		}
	}
	var ln net.Listener
	err := withPrivateUmask(func() error {
		var err error
		ln, err = lc.Listen(ctx, "unix", path)
		return err
	})
	if errors.Is(err, syscall.EADDRINUSE) {
		// Another process bound the path since the check above.
		return nil, fmt.Errorf("%w: %s", ErrAddrInUse, path)
	}
	if err != nil {
		return nil, fmt.Errorf("transport: listen %s: %w", a, err)
	}
	if afterBind != nil {
		afterBind(path)
	}
	// Created 0700 (the umask above): the execute bit means nothing on a
	// socket, but the documented mode is 0600.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("transport: listen %s: %w", a, err)
	}
	ul, ok := ln.(*net.UnixListener)
	fi, err := os.Lstat(path)
	if !ok || err != nil {
		return ln, nil // the standard listener's own unlink on Close
	}
	ul.SetUnlinkOnClose(false)
	return &unixListener{UnixListener: ul, path: path, file: fi}, nil
}

// unixListener is a Unix socket listener whose Close removes its socket
// file only while the file is still the one it created: after that file
// was removed, another process may have taken the path, and closing this
// listener must not take that process's socket away.
type unixListener struct {
	*net.UnixListener
	path   string
	file   fs.FileInfo
	unlink sync.Once // Close may be called more than once, at once
}

// Close removes the socket file, if it is still this listener's (the
// same file, not modified since), then closes the socket, as the standard
// library's listener does in that order.
func (l *unixListener) Close() error {
	l.unlink.Do(func() {
		if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.file) && fi.ModTime().Equal(l.file.ModTime()) {
			os.Remove(l.path)
		}
	})
	return l.UnixListener.Close()
}

// Dial connects to a. The context bounds the connection attempt only. For
// a tls:// address it returns the TCP stream: the caller runs the
// handshake ([TLSClient]), which needs the key it expects.
func Dial(ctx context.Context, a Addr) (net.Conn, error) {
	if a.Scheme != SchemeUDS && !a.OverTCP() {
		return nil, fmt.Errorf("%w: %q", ErrUnsupportedScheme, a.String())
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, a.Network(), a.Address())
	if err != nil {
		return nil, fmt.Errorf("transport: dial %s: %w", a, err)
	}
	return c, nil
}
