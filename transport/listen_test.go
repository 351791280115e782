package transport

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"
)

func TestTCPNetwork(t *testing.T) {
	for _, tc := range []struct{ address, want string }{
		{"0.0.0.0:4200", "tcp4"},
		{"127.0.0.1:0", "tcp4"},
		{"[::]:4200", "tcp"},
		{"[::1]:4200", "tcp"},
		{"[::ffff:127.0.0.1]:4200", "tcp4"}, // an IPv4 address, however written
		{"localhost:4200", "tcp"},
		{":4200", "tcp"},
		{"no port", "tcp"},
	} {
		if got := TCPNetwork(tc.address); got != tc.want {
			t.Errorf("TCPNetwork(%q) = %q, want %q", tc.address, got, tc.want)
		}
	}
}

// A listener on 0.0.0.0 takes IPv4 only: an IPv6 connection to its port
// is not accepted (Go's "tcp" would have opened a dual-stack socket).
func TestListenAllIPv4IsIPv4Only(t *testing.T) {
	ipv6 := true
	if probe, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		ipv6 = false // only IPv4 can be tried here
		t.Logf("no IPv6 loopback: %v", err)
	} else {
		probe.Close()
	}
	ln, err := Listen(context.Background(), Addr{Scheme: SchemeTCP, Host: "0.0.0.0", Port: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if ipv6 {
		if c, err := net.DialTimeout("tcp6", net.JoinHostPort("::1", strconv.Itoa(port)), 2*time.Second); err == nil {
			c.Close()
			t.Fatalf("a listener on 0.0.0.0:%d accepted a connection over IPv6", port)
		}
	}
	c, err := net.DialTimeout("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 2*time.Second)
	if err != nil {
		t.Fatalf("over IPv4: %v", err)
	}
	c.Close()
}
