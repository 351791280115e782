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
	// A known key trusted at a direct address also reachable through
	// NATS, paired again through NATS: its address is nats:, without the
	// mark (which only a direct address may carry).
	both := key()
	l, err = l.With(trust.Peer{Name: "erin", ID: both, Addr: addr, NATS: true})
	if err != nil {
		t.Fatal(err)
	}
	got, next, err := planTrust(l, trust.Peer{Name: "erin", ID: both, Addr: transport.Addr{Scheme: transport.SchemeNATS}})
	if err != nil || got.Addr.Scheme != transport.SchemeNATS || got.NATS {
		t.Fatalf("re-paired through NATS: %+v, %v", got, err)
	}
	if p, ok := next.Lookup(both); !ok || p.NATS || p.Addr.Scheme != transport.SchemeNATS {
		t.Fatalf("planned list has %+v", p)
	}
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
// is. Both carry it as tls://; the answer to another node's line is in
// the line's scheme.
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
			wantTLS := c.want.WithScheme(transport.SchemeTLS)
			if got, err := pairLineAddr(t, n); err != nil || got != wantTLS {
				t.Fatalf("the pairing line carries %v, %v; want %v", got, err, wantTLS)
			}
			if got, err := n.selfAddrFor(advertised); err != nil || got != c.want {
				t.Fatalf("accepting a tcp:// line gives the other node %v, %v; want %v", got, err, c.want)
			}
			if got, err := n.selfAddrFor(advertised.WithScheme(transport.SchemeTLS)); err != nil || got != wantTLS {
				t.Fatalf("accepting a tls:// line gives the other node %v, %v; want %v", got, err, wantTLS)
			}
			// A node that came over a Unix socket gets the only listener
			// there is as a line would carry it: advertised, over TLS.
			uds := transport.Addr{Scheme: transport.SchemeUDS, Path: "/run/other/meerkat.sock"}
			if got, err := n.selfAddrFor(uds); err != nil || got != wantTLS {
				t.Fatalf("accepting a uds:// line with only a TCP listener gives the other node %v, %v; want %v", got, err, wantTLS)
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
			if err := json.Unmarshal(b, &a); err != nil || a.Addr != wantTLS.String() {
				t.Fatalf("the announcement carries %q, %v; want %q", a.Addr, err, wantTLS)
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
			_, _, err := p.open(0, "", false)
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeBadArgument || !strings.Contains(e.Msg, "comms.advertise_tcp") {
				t.Fatalf("offer on a wildcard listener: %v; want a bad_argument naming comms.advertise_tcp", err)
			}
			if _, err := n.selfAddrFor(wild); !errors.As(err, &e) || !strings.Contains(e.Msg, "comms.advertise_tcp") {
				t.Fatalf("accepting a tcp:// line on a wildcard listener: %v; want the same refusal", err)
			}
			if _, err := n.selfAddrFor(transport.Addr{Scheme: transport.SchemeUDS, Path: "/run/other/meerkat.sock"}); !errors.As(err, &e) || !strings.Contains(e.Msg, "comms.advertise_tcp") {
				t.Fatalf("accepting a uds:// line on a wildcard listener only: %v; want the same refusal", err)
			}
			if _, err := n.localAddr(); err == nil {
				t.Fatal("an announcement would carry the wildcard address")
			}

			h.Config.Comms.AdvertiseTCP = "192.0.2.10:4300"
			want := transport.Addr{Scheme: transport.SchemeTLS, Host: "192.0.2.10", Port: 4300}
			info, _, err := p.open(0, "", false)
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

// A node that refuses plaintext TCP pairs over TLS only: it does not
// answer a tcp:// line, and does not trust a tcp:// address from a pairing.
func TestPairRefusesPlaintextPeers(t *testing.T) {
	h, _ := testHome(t, "alice", func(cfg *config.Config) {
		cfg.Comms.ListenUDS = config.UDSOff
		cfg.Comms.ListenTCP = "127.0.0.1:4300"
		cfg.Comms.TCPPlaintext = config.Refuse
	})
	n := &Node{h: h, addrs: []transport.Addr{{Scheme: transport.SchemeTCP, Host: "127.0.0.1", Port: 4300}}}
	plain := transport.Addr{Scheme: transport.SchemeTCP, Host: "192.0.2.20", Port: 4200}
	var e *Error
	if _, err := n.selfAddrFor(plain); !errors.As(err, &e) || !strings.Contains(e.Msg, "comms.tcp_plaintext") {
		t.Fatalf("answering a tcp:// line: %v; want a refusal naming comms.tcp_plaintext", err)
	}
	if got, err := n.selfAddrFor(plain.WithScheme(transport.SchemeTLS)); err != nil || got.Scheme != transport.SchemeTLS {
		t.Fatalf("answering a tls:// line: %v, %v", got, err)
	}
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(trust.Peer) (trust.Peer, error){"plan": n.planPeer, "trust": n.trustPeer} {
		if _, err := f(trust.Peer{Name: "bob", ID: kp.ID(), Addr: plain}); err == nil || !strings.Contains(err.Error(), "comms.tcp_plaintext") {
			t.Fatalf("%s a tcp:// peer: %v; want a refusal naming comms.tcp_plaintext", name, err)
		}
	}
	// Nor by hand (meerkatd peers add): every send to it would fail.
	if _, err := AddPeer(h, "bob", kp.ID().String(), plain.String(), false, ""); CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), "comms.tcp_plaintext") {
		t.Fatalf("peers add of a tcp:// peer: %v; want bad_argument naming comms.tcp_plaintext", err)
	}
	if l, err := trust.LoadOrEmpty(h.TrustPath()); err != nil {
		t.Fatal(err)
	} else if _, ok := l.Lookup(kp.ID()); ok {
		t.Fatal("the refused peer is in the trust file")
	}
	if _, err := n.trustPeer(trust.Peer{Name: "dave", ID: kp.ID(), Addr: plain.WithScheme(transport.SchemeTLS)}); err != nil {
		t.Fatalf("trusting a tls:// peer: %v", err)
	}
	if l, err := trust.LoadOrEmpty(h.TrustPath()); err != nil {
		t.Fatal(err)
	} else if p, ok := l.Lookup(kp.ID()); !ok || p.Addr.Scheme != transport.SchemeTLS {
		t.Fatalf("the tls:// peer is trusted as %+v, %v", p, ok)
	}
}

// ReplacePeer changes a trusted peer's address (and NATS flag, and meta
// when given) in place; it refuses a name trusted with another key, a
// key trusted under another name, a peer not trusted, and arguments
// AddPeer refuses, leaving the file as it was.
func TestReplacePeer(t *testing.T) {
	h, bob := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = config.StoreMemory })
	carol, _ := identity.GenerateKeypair()
	if _, err := ReplacePeer(h, "bob", bob.ID().String(), "uds:///run/bob.sock", false, `{"team":"red"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := AddPeer(h, "carol", carol.ID().String(), "uds:///run/carol.sock", false, ""); err != nil {
		t.Fatal(err)
	}
	peer := func(name string) trust.Peer {
		t.Helper()
		l, err := trust.Load(h.TrustPath())
		if err != nil {
			t.Fatal(err)
		}
		p, ok := l.ByName(name)
		if !ok {
			t.Fatalf("%s is not in the trust file", name)
		}
		return p
	}
	for _, tc := range []struct {
		name, key, addr string
		nats            bool
		meta            string
		code            string // "" for success
		wantAddr, want  string // the address and meta bob has after it
		wantNATS        bool
	}{
		{name: "bob", key: bob.ID().String(), addr: "tls://192.0.2.7", wantAddr: "tls://192.0.2.7:4200", want: `{"team":"red"}`},
		{name: "BOB", key: bob.ID().String(), addr: "uds:///run/bob2.sock", nats: true, wantAddr: "uds:///run/bob2.sock", wantNATS: true, want: `{"team":"red"}`},
		{name: "bob", key: bob.ID().String(), addr: "nats:", meta: `{"team":"blue"}`, wantAddr: "nats:", want: `{"team":"blue"}`},
		{name: "bob", key: carol.ID().String(), addr: "tls://192.0.2.8", code: CodeBadArgument, wantAddr: "nats:", want: `{"team":"blue"}`},
		{name: "dave", key: bob.ID().String(), addr: "tls://192.0.2.8", code: CodeBadArgument, wantAddr: "nats:", want: `{"team":"blue"}`},
		{name: "dave", key: h.Key.ID().String(), addr: "tls://192.0.2.8", code: CodeBadArgument, wantAddr: "nats:", want: `{"team":"blue"}`},
		{name: "bob", key: bob.ID().String(), addr: "http://192.0.2.8", code: CodeBadArgument, wantAddr: "nats:", want: `{"team":"blue"}`},
		{name: "bob", key: bob.ID().String(), addr: "tls://192.0.2.8", meta: `[1]`, code: CodeBadArgument, wantAddr: "nats:", want: `{"team":"blue"}`},
	} {
		p, err := ReplacePeer(h, tc.name, tc.key, tc.addr, tc.nats, tc.meta)
		if (tc.code == "") != (err == nil) || (err != nil && CodeOf(err) != tc.code) {
			t.Fatalf("ReplacePeer(%q, %q): %v (code %q), want code %q", tc.name, tc.addr, err, CodeOf(err), tc.code)
		}
		if err == nil && (p.Name != "bob" || p.Addr != tc.wantAddr) {
			t.Fatalf("ReplacePeer(%q, %q) = %+v", tc.name, tc.addr, p)
		}
		got := peer("bob")
		if got.Addr.String() != tc.wantAddr || got.NATS != tc.wantNATS || string(got.Meta) != tc.want || got.ID != bob.ID() {
			t.Fatalf("after ReplacePeer(%q, %q): bob is %s nats=%v meta %s", tc.name, tc.addr, got.Addr, got.NATS, got.Meta)
		}
		if c := peer("carol"); c.Addr.String() != "uds:///run/carol.sock" || c.ID != carol.ID() {
			t.Fatalf("carol changed: %+v", c)
		}
	}
	// Adding the same peer again says how to change it.
	if _, err := AddPeer(h, "Bob", bob.ID().String(), "tls://192.0.2.9", false, ""); CodeOf(err) != CodeBadArgument || !strings.Contains(err.Error(), "--replace") {
		t.Fatalf("adding bob again: %v, want bad_argument naming --replace", err)
	}
	if _, err := AddPeer(h, "bob2", bob.ID().String(), "tls://192.0.2.9", false, ""); CodeOf(err) != CodeBadArgument || strings.Contains(err.Error(), "--replace") {
		t.Fatalf("adding bob's key under another name: %v, want bad_argument without --replace", err)
	}
	dave, _ := identity.GenerateKeypair()
	if _, err := ReplacePeer(h, "dave", dave.ID().String(), "tls://192.0.2.9", false, ""); CodeOf(err) != CodeUnknownPeer {
		t.Fatalf("replacing a peer not trusted: %v, want %s", err, CodeUnknownPeer)
	}
}
