//go:build unix

package transport

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A Unix socket is created private: even with a permissive process umask
// the socket file is never open to others, not even between bind and the
// first moment the caller could fix its mode.
func TestListenUnixCreatesPrivateSocket(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	checked := false
	ln, err := listenUnix(context.Background(), net.ListenConfig{}, Addr{Scheme: SchemeUDS, Path: path}, func(p string) {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("socket created with mode %v: others could connect", perm)
		}
		checked = true
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !checked {
		t.Fatal("the after-bind check did not run")
	}
	if cur := syscall.Umask(0); cur != 0 {
		t.Errorf("umask left at %#o, want the caller's 0", cur)
	}
}

// The private umask is the whole process's while a socket is created: a
// directory another goroutine makes meanwhile must stay usable by its
// owner (0177 would drop its search bit, and the execute bit of a binary
// a child process builds meanwhile).
func TestPrivateUmaskKeepsOwnerBits(t *testing.T) {
	dir := t.TempDir()
	var mode os.FileMode
	err := withPrivateUmask(func() error {
		sub := filepath.Join(dir, "made-meanwhile")
		if err := os.Mkdir(sub, 0o755); err != nil {
			return err
		}
		fi, err := os.Stat(sub)
		mode = fi.Mode().Perm()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if mode != 0o700 {
		t.Fatalf("a directory made under the private umask has mode %v, want 0700", mode)
	}
}
