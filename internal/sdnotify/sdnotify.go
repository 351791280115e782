// Package sdnotify tells a service manager about the state of the process
// with the sd_notify protocol: newline-separated VAR=value assignments in
// one datagram on the Unix socket the manager names in $NOTIFY_SOCKET.
//
// It is not a client of libsystemd and does not read the environment: the
// caller passes the socket address it found (an empty address means no
// manager listens, and every call does nothing). A leading '@' names a
// socket in the abstract namespace.
//
// The functions are safe for concurrent use; each sends one datagram on a
// socket of its own.
package sdnotify

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Sends time out after writeTimeout: a manager that does not read its
// socket must not hold up the process.
const writeTimeout = 2 * time.Second

// Ready is the state of a process that has finished starting: its
// listeners accept connections. MAINPID names the process the manager
// should watch.
func Ready(pid int) string { return "READY=1\nMAINPID=" + strconv.Itoa(pid) }

// Stopping is the state of a process that has begun to shut down.
const Stopping = "STOPPING=1"

// Notify sends state to the socket at addr. It does nothing and returns
// nil when addr is empty.
func Notify(addr, state string) error {
	if addr == "" {
		return nil
	}
	if !strings.HasPrefix(addr, "@") && !strings.HasPrefix(addr, "/") {
		return fmt.Errorf("sdnotify: NOTIFY_SOCKET %q is neither an absolute path nor an abstract socket", addr)
	}
	raddr := &net.UnixAddr{Net: "unixgram", Name: addr}
	if addr[0] == '@' {
		raddr.Name = "\x00" + addr[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, raddr)
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	return nil
}
