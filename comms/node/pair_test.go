package node

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
	"github.com/meerkatd/meerkatd/trust/pair"
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

// pairLineAddr opens an offer on n and returns the address its line
// carries.
func pairLineAddr(t *testing.T, n *Node) (transport.Addr, error) {
	t.Helper()
	o, err := n.PairOffer(context.Background(), PairOptions{})
	if err != nil {
		return transport.Addr{}, err
	}
	l, err := pair.ParseLine(o.Line)
	if err != nil {
		t.Fatalf("the offer's line %q: %v", o.Line, err)
	}
	return l.Addr, nil
}

// Pairing lines and announcements carry comms.advertise_tcp
// when it is set; a TCP listener on a specific address is carried as it
// is.
func TestPairLineAdvertisedAddress(t *testing.T) {
	port := freeTCPPort(t)
	listen := transport.Addr{Scheme: transport.SchemeTCP, Host: "127.0.0.1", Port: uint16(port)}
	advertised := transport.Addr{Scheme: transport.SchemeTCP, Host: "alice.example", Port: 4300}
	for _, c := range []struct {
		name, advertise string
		want            transport.Addr
	}{
		{"specific address", "", listen},
		{"advertised", "alice.example:4300", advertised},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, _ := testHome(t, "alice", func(cfg *config.Config) {
				cfg.Store.Mode = config.StoreMemory
				cfg.Comms.ListenUDS = config.UDSOff // announcements carry the TCP address
				cfg.Comms.ListenTCP = strings.TrimPrefix(listen.String(), "tcp://")
				cfg.Comms.AdvertiseTCP = c.advertise
			})
			n := startTest(t, h, ModeServe)
			if got, err := pairLineAddr(t, n); err != nil || got != c.want {
				t.Fatalf("the pairing line carries %v, %v; want %v", got, err, c.want)
			}
			if got, err := n.selfAddrFor(advertised); err != nil || got != c.want {
				t.Fatalf("accepting a tcp:// line gives the other node %v, %v; want %v", got, err, c.want)
			}
			dir := t.TempDir()
			remove, err := n.Announce(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer remove()
			b, err := os.ReadFile(announcePath(dir, h))
			if err != nil {
				t.Fatal(err)
			}
			var a Announcement
			if err := json.Unmarshal(b, &a); err != nil || a.Addr != c.want.String() {
				t.Fatalf("the announcement carries %q, %v; want %q", a.Addr, err, c.want)
			}
		})
	}
}

// A node listening on all interfaces does not put the wildcard
// address in a pairing line (the other node would record an address that
// dials itself) unless comms.advertise_tcp says where it is reached; the
// refusal names the key. (The listener is not opened: the node is given
// the address it would have.)
func TestPairLineWildcardListener(t *testing.T) {
	for _, host := range []string{"0.0.0.0", "::"} {
		wild := transport.Addr{Scheme: transport.SchemeTCP, Host: host, Port: 4300}
		t.Run(wild.String(), func(t *testing.T) {
			h, _ := testHome(t, "alice", func(cfg *config.Config) {
				cfg.Comms.ListenUDS = config.UDSOff
				cfg.Comms.ListenTCP = strings.TrimPrefix(wild.String(), "tcp://")
			})
			n := &Node{h: h, addrs: []transport.Addr{wild}}
			p := newPairing(n)
			_, _, err := p.open(0, "")
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeBadArgument || !strings.Contains(e.Msg, "comms.advertise_tcp") {
				t.Fatalf("offer on a wildcard listener: %v; want a bad_argument naming comms.advertise_tcp", err)
			}
			if _, err := n.selfAddrFor(wild); !errors.As(err, &e) || !strings.Contains(e.Msg, "comms.advertise_tcp") {
				t.Fatalf("accepting a tcp:// line on a wildcard listener: %v; want the same refusal", err)
			}
			if _, err := n.localAddr(); err == nil {
				t.Fatal("an announcement would carry the wildcard address")
			}

			h.Config.Comms.AdvertiseTCP = "192.0.2.10:4300"
			want := transport.Addr{Scheme: transport.SchemeTCP, Host: "192.0.2.10", Port: 4300}
			info, _, err := p.open(0, "")
			if err != nil {
				t.Fatalf("offer with comms.advertise_tcp: %v", err)
			}
			if l, err := pair.ParseLine(info.Line); err != nil || l.Addr != want {
				t.Fatalf("the line carries %v, %v; want %v", l.Addr, err, want)
			}
			p.cancel(info.ID)
		})
	}
}
