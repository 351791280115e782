package transport

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A live listener that cannot take connections right now (its backlog is
// full) is not stale: Listen must not take its path.
func TestListenRefusesBusyLiveSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "l")
	live, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	// fill the backlog of the live (busy, never-accepting) listener
	var conns []net.Conn
	for i := 0; i < 8; i++ {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Logf("dial %d: %v", i, err)
			break
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	ln, err := Listen(context.Background(), Addr{Scheme: SchemeUDS, Path: path})
	if err == nil {
		ln.Close()
		t.Fatal("Listen took over the path of a live listener whose backlog is full")
	}
	if !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("got %v, want ErrAddrInUse", err)
	}
}
