package transport

import (
	"context"
	"net"
	"testing"

	"github.com/meerkatd/meerkatd/internal/testutil"
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
	ln, err := Listen(context.Background(), Addr{Scheme: SchemeTCP, Host: "0.0.0.0", Port: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	testutil.CheckIPv4Only(t, ln.Addr().(*net.TCPAddr).Port)
}
