package node

import (
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

func TestPlanTrustNames(t *testing.T) {
	key := func() identity.PeerID { kp, _ := identity.GenerateKeypair(); return kp.ID() }
	addr := transport.Addr{Scheme: transport.SchemeTCP, Host: "127.0.0.1", Port: 4300}
	long := strings.Repeat("a", trust.MaxNameLen)
	known := key()
	l, err := trust.New(trust.Peer{Name: "Bob", ID: key(), Addr: addr}, trust.Peer{Name: long, ID: key(), Addr: addr},
		trust.Peer{Name: "carol", ID: known, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	other := addr
	other.Port = 4400
	for _, c := range []struct {
		in   trust.Peer
		want string
	}{
		{trust.Peer{Name: "bob", ID: key(), Addr: addr}, "bob-2"},         // case-insensitive clash
		{trust.Peer{Name: long, ID: key(), Addr: addr}, long[:62] + "-2"}, // suffix fits the limit
		{trust.Peer{Name: "dave", ID: key(), Addr: addr}, "dave"},
		{trust.Peer{Name: "someone", ID: known, Addr: other}, "carol"}, // a known key keeps its entry
	} {
		got, next, err := planTrust(l, c.in)
		if err != nil || got.Name != c.want {
			t.Errorf("planTrust(%.20s) = %q, %v; want %q", c.in.Name, got.Name, err, c.want)
			continue
		}
		if p, ok := next.Lookup(c.in.ID); !ok || p.Name != c.want || p.Addr != c.in.Addr {
			t.Errorf("planned list has %+v", p)
		}
	}
}
