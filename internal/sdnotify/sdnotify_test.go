package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// listen opens a datagram socket at name (a path, or "@…" for the
// abstract namespace) and returns it.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	laddr := &net.UnixAddr{Net: "unixgram", Name: name}
	if name[0] == '@' {
		laddr.Name = "\x00" + name[1:]
	}
	c, err := net.ListenUnixgram("unixgram", laddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func receive(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotify(t *testing.T) {
	dir, err := os.MkdirTemp("", "sdn") // short: socket paths are limited to about 100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, addr := range []string{
		filepath.Join(dir, "notify.sock"),
		fmt.Sprintf("@meerkatd-sdnotify-test-%d", os.Getpid()),
	} {
		t.Run(addr, func(t *testing.T) {
			c := listen(t, addr)
			if err := Notify(addr, Ready(1234)); err != nil {
				t.Fatal(err)
			}
			if got, want := receive(t, c), "READY=1\nMAINPID=1234"; got != want {
				t.Errorf("received %q, want %q", got, want)
			}
			if err := Notify(addr, Stopping); err != nil {
				t.Fatal(err)
			}
			if got := receive(t, c); got != "STOPPING=1" {
				t.Errorf("received %q, want STOPPING=1", got)
			}
		})
	}
}

func TestNotifyUnset(t *testing.T) {
	if err := Notify("", Ready(1)); err != nil {
		t.Errorf("Notify with no socket: %v, want nil", err)
	}
}

func TestNotifyErrors(t *testing.T) {
	dir := t.TempDir()
	for _, addr := range []string{
		"relative/notify.sock",       // neither absolute nor abstract
		filepath.Join(dir, "absent"), // nobody listens
	} {
		if err := Notify(addr, Stopping); err == nil {
			t.Errorf("Notify(%q): nil error", addr)
		}
	}
}
