package testutil

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// WriteHolder is a connection whose writes can be held and then sent in
// one write, so that what a TLS connection writes as several records
// arrives together.
type WriteHolder struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	held []byte
}

// Hold makes later writes wait, in order, for Release.
func (w *WriteHolder) Hold() {
	w.mu.Lock()
	w.hold = true
	w.mu.Unlock()
}

// Release writes what was held in one write; later writes go straight
// through.
func (w *WriteHolder) Release() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hold = false
	if len(w.held) == 0 {
		return nil
	}
	_, err := w.Conn.Write(w.held)
	w.held = nil
	return err
}

func (w *WriteHolder) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hold {
		w.held = append(w.held, b...)
		return len(b), nil
	}
	return w.Conn.Write(b)
}

// CheckIPv4Only checks that what listens at port on 0.0.0.0 takes a
// connection over IPv4 (127.0.0.1) and, where this machine has an IPv6
// loopback, none over IPv6 (::1): Go's "tcp" on 0.0.0.0 would have
// listened on both.
func CheckIPv4Only(t testing.TB, port int) {
	t.Helper()
	p := strconv.Itoa(port)
	if probe, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Logf("no IPv6 loopback, only IPv4 tried: %v", err)
	} else {
		probe.Close()
		if c, err := net.DialTimeout("tcp6", net.JoinHostPort("::1", p), 2*time.Second); err == nil {
			c.Close()
			t.Fatalf("a listener on 0.0.0.0:%d accepted a connection over IPv6", port)
		}
	}
	c, err := net.DialTimeout("tcp4", net.JoinHostPort("127.0.0.1", p), 2*time.Second)
	if err != nil {
		t.Fatalf("over IPv4: %v", err)
	}
	c.Close()
}
