package transport

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestPeerUID(t *testing.T) {
	dir, err := os.MkdirTemp("", "mkc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	uid, err := PeerUID(s)
	switch runtime.GOOS {
	case "linux", "darwin", "freebsd":
		if err != nil || uid != uint32(os.Getuid()) {
			t.Fatalf("PeerUID = %d, %v; want %d", uid, err, os.Getuid())
		}
	default:
		if !errors.Is(err, ErrNoPeerCred) {
			t.Fatalf("PeerUID = %d, %v; want ErrNoPeerCred here", uid, err)
		}
	}
	tc, ts := net.Pipe()
	defer tc.Close()
	defer ts.Close()
	if _, err := PeerUID(ts); !errors.Is(err, ErrNoPeerCred) {
		t.Fatalf("PeerUID of a pipe: %v, want ErrNoPeerCred", err)
	}
}
