package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
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
	if uid, ok := peerUID(s); !ok || uid != strconv.Itoa(os.Getuid()) {
		t.Fatalf("peerUID = %q, %v; want %d", uid, ok, os.Getuid())
	}
	tc, ts := net.Pipe()
	defer tc.Close()
	defer ts.Close()
	if _, ok := peerUID(ts); ok {
		t.Fatal("peerUID of a non-socket connection")
	}
}
