package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseAddr(t *testing.T) {
	tests := []struct {
		in   string
		want string // canonical form, "" for an error
		err  error
	}{
		{"uds:///tmp/a.sock", "uds:///tmp/a.sock", nil},
		{"uds:///tmp//x/../a.sock", "uds:///tmp/a.sock", nil},
		{"UDS:///run/m.sock", "uds:///run/m.sock", nil},
		{"tcp://127.0.0.1:4300", "tcp://127.0.0.1:4300", nil},
		{"tcp://example.org", "tcp://example.org:4200", nil},
		{"tcp://[::1]:99", "tcp://[::1]:99", nil},
		{"tcp://[::1]", "tcp://[::1]:4200", nil},
		{"tcp://[fe80::1%25eth0]:5", "", ErrBadAddr},
		{"tls://127.0.0.1:4300", "tls://127.0.0.1:4300", nil},
		{"TLS://Example.org", "tls://Example.org:4200", nil},
		{"tls://[::1]", "tls://[::1]:4200", nil},
		{"tls://", "", ErrBadAddr},
		{"tls://h:0", "", ErrBadAddr},
		{"tls://u@h:1", "", ErrBadAddr},
		{"tls://::1:80", "", ErrBadAddr},
		{"tls:///tmp/a.sock", "", ErrBadAddr},
		{"nats:", "nats:", nil},
		{"NATS:", "nats:", nil},
		{"nats://h:4222", "", ErrBadAddr},
		{"nats:x", "", ErrUnsupportedScheme},
		{"nats", "", ErrUnsupportedScheme},
		{"ssl://h:1", "", ErrUnsupportedScheme},
		{"", "", ErrUnsupportedScheme},
		{"/tmp/a.sock", "", ErrUnsupportedScheme},
		{"127.0.0.1:4200", "", ErrUnsupportedScheme},
		{"http://x:1", "", ErrUnsupportedScheme},
		{"unix:///tmp/a", "", ErrUnsupportedScheme},
		{"uds://relative.sock", "", ErrBadAddr},
		{"uds://", "", ErrBadAddr},
		{"uds:///", "", ErrBadAddr},
		{"uds:///tmp/a.sock?x=1", "", ErrBadAddr},
		{"tcp://", "", ErrBadAddr},
		{"tcp://:4200", "", ErrBadAddr},
		{"tcp://h:0", "", ErrBadAddr},
		{"tcp://h:65536", "", ErrBadAddr},
		{"tcp://h:-1", "", ErrBadAddr},
		{"tcp://h:x", "", ErrBadAddr},
		{"tcp://h:", "", ErrBadAddr},
		{"tcp://u@h:1", "", ErrBadAddr},
		{"tcp://h:1/path", "", ErrBadAddr},
		{"tcp://h:1?q", "", ErrBadAddr},
		{"tcp://::1:80", "", ErrBadAddr},
		{"tcp://[zz]:1", "", ErrBadAddr},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			a, err := ParseAddr(tc.in)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("got %v, %v; want %v", a, err, tc.err)
				}
				if !strings.Contains(err.Error(), "\""+tc.in+"\"") {
					t.Errorf("error %q does not quote the input", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.String() != tc.want {
				t.Fatalf("String() = %q, want %q", a.String(), tc.want)
			}
			again, err := ParseAddr(a.String())
			if err != nil || again != a {
				t.Fatalf("canonical form does not round-trip: %v, %v", again, err)
			}
		})
	}
}

func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"uds:///tmp/a.sock", "tcp://[::1]:99", "tcp://h", "tcp://h:1/x", "uds://x", "tls://[::1]:99", "tls://h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddr(s)
		if err != nil {
			if !errors.Is(err, ErrBadAddr) && !errors.Is(err, ErrUnsupportedScheme) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := ParseAddr(a.String())
		if err != nil || again != a {
			t.Fatalf("%q parses to %+v whose text %q parses to %+v, %v", s, a, a.String(), again, err)
		}
	})
}

func shortTempDir(t *testing.T) string {
	// Unix socket paths are limited to about 100 bytes; t.TempDir() can
	// be long, so use a short directory of our own.
	dir, err := os.MkdirTemp("", "mk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestListenUnix(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(shortTempDir(t), "n.sock")
	a, err := ParseAddr("uds://" + path)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, %v; want 0600", st.Mode(), err)
	}
	// A live listener is not replaced.
	if _, err := Listen(ctx, a); !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("second listener on a live socket: %v", err)
	}
	// The first still works. (The probe above was a connection too, so
	// serve every connection until the listener closes.)
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			WriteFrame(c, []byte("hi"))
			c.Close()
		}
	}()
	c, err := Dial(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if p, err := ReadFrame(c, 0); err != nil || string(p) != "hi" {
		t.Fatalf("read %q, %v", p, err)
	}
	c.Close()
	ln.Close()
	<-served
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file left after Close: %v", err)
	}
}

// A listener's Close removes its socket file, but not a file that took
// the path after its own was removed (another node's socket, say).
func TestListenUnixCloseRemovesOnlyItsOwnFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(shortTempDir(t), "o.sock")
	a, _ := ParseAddr("uds://" + path)
	ln, err := Listen(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other, err := Listen(ctx, a) // the path is free: another listener takes it
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("closing the first listener removed the second's socket: %v", err)
	}
	other.Close()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the second listener left its socket file: %v", err)
	}
}

func TestListenUnixReplacesStaleSocket(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(shortTempDir(t), "s.sock")
	// Leave a socket file with nobody listening, as a killed process would.
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("setup: stale socket missing: %v", err)
	}
	a, _ := ParseAddr("uds://" + path)
	ln2, err := Listen(ctx, a)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	ln2.Close()
}

func TestListenUnixNeverRemovesNonSocket(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "file.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, _ := ParseAddr("uds://" + path)
	if _, err := Listen(context.Background(), a); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("listening over a regular file: %v", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "precious" {
		t.Fatalf("regular file damaged: %q, %v", b, err)
	}
}

func TestListenDialTCP(t *testing.T) {
	ctx := context.Background()
	ln, err := Listen(ctx, Addr{Scheme: SchemeTCP, Host: "127.0.0.1"}) // port 0: any free port
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := ParseAddr("tcp://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			WriteFrame(c, []byte("tcp"))
			c.Close()
		}
	}()
	c, err := Dial(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if p, err := ReadFrame(c, 0); err != nil || string(p) != "tcp" {
		t.Fatalf("read %q, %v", p, err)
	}
	if _, err := Dial(ctx, Addr{}); !errors.Is(err, ErrUnsupportedScheme) {
		t.Fatalf("dial zero Addr: %v", err)
	}
}

// A socket path over the system's limit is refused as too long, saying
// how long it is and what the limit is, not as malformed; one at the
// limit is taken.
func TestParseAddrSocketPathLimit(t *testing.T) {
	long := "/" + strings.Repeat("a", MaxUDSPath+21)
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/" + strings.Repeat("a", MaxUDSPath-1), true},
		{"/" + strings.Repeat("a", MaxUDSPath), false},
		{long, false},
		{"/" + strings.Repeat("a", MaxUDSPath-3) + "/.", true}, // the cleaned path counts
	} {
		err := CheckUDSPath(filepath.Clean(tc.path))
		_, perr := ParseAddr("uds://" + tc.path)
		if tc.ok {
			if err != nil || perr != nil {
				t.Errorf("%d-byte path: CheckUDSPath %v, ParseAddr %v", len(tc.path), err, perr)
			}
			continue
		}
		for _, err := range []error{err, perr} {
			if !errors.Is(err, ErrPathTooLong) || !errors.Is(err, ErrBadAddr) {
				t.Errorf("%d-byte path: %v, want ErrPathTooLong and ErrBadAddr", len(tc.path), err)
				continue
			}
			want := fmt.Sprintf("socket path too long: %q is %d bytes, over this system's limit of %d", tc.path, len(tc.path), MaxUDSPath)
			if msg := err.Error(); !strings.Contains(msg, want) || strings.Contains(msg, "malformed") {
				t.Errorf("%d-byte path: %q, want %q", len(tc.path), msg, want)
			}
		}
	}
}
