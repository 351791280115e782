package natsrelay

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
	"github.com/meerkatd/meerkatd/trust/pair"
)

// Two nodes pair through NATS with the same exchange as over a socket,
// under the least-privilege users of docs/nats.md: each ends up trusting
// the other at nats:, and a wrong code pairs nobody.
func TestPairingThroughNATS(t *testing.T) {
	testutil.CheckGoroutines(t)
	nodes := newNodes(t, 2)
	s := startServer(t, "s1", leastPrivilegeConf(t, nodes), nil, "")
	a, b := nodes[0], nodes[1]
	a.connect(t, s.ClientURL(), nodeOpts(0))
	b.connect(t, s.ClientURL(), nodeOpts(1))
	natsAddr, _ := transport.ParseAddr("nats:")

	var mu sync.Mutex
	var aTrusts []trust.Peer
	resp := pair.NewResponder(a.kp, "alice", func(p trust.Peer) (trust.Peer, error) {
		mu.Lock()
		defer mu.Unlock()
		aTrusts = append(aTrusts, p)
		return p, nil
	})
	offer, err := resp.Open(natsAddr, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if offer.Line.Addr.String() != "nats:" {
		t.Fatalf("line %s", offer.Line)
	}
	stop, err := a.relay.ServePairing(offer.Line.OfferID(), func(c net.Conn) { resp.Serve(c, c, pair.NATSSource) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := ctxT(t)

	// A wrong code reaches no offer.
	wrong := offer.Line
	wrong.Code[0] ^= 1
	c, err := b.relay.DialPairing(ctx, offer.Line.OfferID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pair.AcceptConn(ctx, c, b.kp, "bob", natsAddr, wrong, "", nil, func(p trust.Peer) (trust.Peer, error) { return p, nil }); !errors.Is(err, pair.ErrNoOffer) && !errors.Is(err, pair.ErrBadProof) {
		t.Fatalf("pairing with a wrong code: %v", err)
	}

	var bTrusts trust.Peer
	c, err = b.relay.DialPairing(ctx, offer.Line.OfferID())
	if err != nil {
		t.Fatal(err)
	}
	line, err := pair.ParseLine(offer.Line.String())
	if err != nil {
		t.Fatal(err)
	}
	got, err := pair.AcceptConn(ctx, c, b.kp, "bob", natsAddr, line, "", nil, func(p trust.Peer) (trust.Peer, error) {
		bTrusts = p
		return p, nil
	})
	if err != nil {
		t.Fatalf("pairing through NATS: %v", err)
	}
	if got.ID != a.kp.ID() || got.Addr.String() != "nats:" || bTrusts.ID != a.kp.ID() {
		t.Fatalf("bob trusts %+v", got)
	}
	if p, err := offer.Wait(ctx); err != nil || p.ID != b.kp.ID() || p.Addr.String() != "nats:" || p.Name != "bob" {
		t.Fatalf("alice's offer: %+v, %v", p, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(aTrusts) != 1 {
		t.Fatalf("alice committed %d peers", len(aTrusts))
	}
}

// A node pairing through NATS must be reached through NATS: the hello
// must say nats:, not a socket path of another host.
func TestPairingThroughNATSRefusesOtherAddresses(t *testing.T) {
	testutil.CheckGoroutines(t)
	_, a, b := twoOnOneServer(t)
	natsAddr, _ := transport.ParseAddr("nats:")
	resp := pair.NewResponder(a.kp, "alice", func(p trust.Peer) (trust.Peer, error) {
		t.Error("committed a peer that gave a socket path")
		return p, nil
	})
	offer, err := resp.Open(natsAddr, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	stop, err := a.relay.ServePairing(offer.Line.OfferID(), func(c net.Conn) { resp.Serve(c, c, pair.NATSSource) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := ctxT(t)
	c, err := b.relay.DialPairing(ctx, offer.Line.OfferID())
	if err != nil {
		t.Fatal(err)
	}
	uds, _ := transport.ParseAddr("uds:///tmp/elsewhere.sock")
	if _, err := pair.AcceptConn(ctx, c, b.kp, "bob", uds, offer.Line, "", nil, func(p trust.Peer) (trust.Peer, error) { return p, nil }); !errors.Is(err, pair.ErrRefused) && !errors.Is(err, pair.ErrProtocol) {
		t.Fatalf("a socket address through NATS: %v", err)
	}
}

// The exchange's connection holds bounds: a message over the limit is
// refused, a deadline ends a read.
func TestPairConnBounds(t *testing.T) {
	testutil.CheckGoroutines(t)
	s := startServer(t, "s1", "", nil, "")
	nodes := newNodes(t, 1)
	nodes[0].connect(t, s.ClientURL(), Options{})
	c, err := nodes[0].relay.DialPairing(context.Background(), "0011")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(bytes.Repeat([]byte{'x'}, maxPairMsg+1)); !errors.Is(err, errPairTooLong) {
		t.Fatalf("an over-long write: %v", err)
	}
	c.SetDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past its deadline: %v", err)
	}
	// A message over the limit sent to its inbox is refused by the reader.
	raw := rawConn(t, s.ClientURL())
	mc := c.(*msgConn)
	raw.Publish(mc.inbox, bytes.Repeat([]byte{'y'}, maxPairMsg+1))
	raw.Flush()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, errPairTooLong) {
		t.Fatalf("an over-long message: %v", err)
	}
}
