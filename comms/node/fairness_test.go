package node

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// floodOne writes one message from kp to n on c and reports whether it
// was acknowledged (false: the connection closed without an ack).
func floodOne(t *testing.T, c net.Conn, kp *identity.Keypair, to identity.PeerID) bool {
	t.Helper()
	e, err := wire.Seal(kp, identity.NewUUID(), to, wire.Message("flood"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if err := transport.WriteFrame(c, b); err != nil {
		return false
	}
	ackBytes, err := transport.ReadFrame(c, 0)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("neither an ack nor a close")
		}
		return false
	}
	ack, err := wire.Open(ackBytes)
	if got, _ := ack.Kind.InReplyTo(); err != nil || got != e.ID {
		t.Fatalf("bad ack %+v, %v", ack, err)
	}
	return true
}

// One trusted peer flooding a node with a small inbox fills its share and
// is then refused (not acked), while a second peer's messages are still
// acked; pending counts all of it. In both inbox modes.
func TestNodePeerShareFlood(t *testing.T) {
	for _, mode := range []string{config.StoreMemory, config.StoreSQLite} {
		t.Run(mode, func(t *testing.T) {
			h, _ := testHome(t, "bob", func(c *config.Config) {
				c.Store.Mode = mode
				c.Comms.InboxMax = 100
			})
			alice, _ := identity.GenerateKeypair()
			carol, _ := identity.GenerateKeypair()
			nowhere := transport.Addr{Scheme: transport.SchemeUDS, Path: "/nonexistent/x.sock"}
			l, err := trust.New(trust.Peer{Name: "alice", ID: alice.ID(), Addr: nowhere}, trust.Peer{Name: "carol", ID: carol.ID(), Addr: nowhere})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Save(h.TrustPath()); err != nil {
				t.Fatal(err)
			}
			n := startTest(t, h, ModeServe)
			dial := func() net.Conn {
				c, err := transport.Dial(context.Background(), n.Addrs()[0])
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			c := dial()
			acked := 0
			for range 100 {
				if !floodOne(t, c, alice, h.Key.ID()) {
					break
				}
				acked++
			}
			if acked != 50 {
				t.Fatalf("the flooder got %d acks, want 50", acked)
			}
			c = dial()
			for i := range 10 {
				if !floodOne(t, c, carol, h.Key.ID()) {
					t.Fatalf("the second peer's message %d was refused", i)
				}
			}
			st, err := n.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.Rejected[comms.RejectPeerShare] != 1 || st.Pending != 60 {
				t.Fatalf("status: rejected %v, pending %d; want 1 %s, pending 60", st.Rejected, st.Pending, comms.RejectPeerShare)
			}
		})
	}
}

// pending counts responses and kinds the node does not model too: an
// agent that reads until pending is zero drains the inbox.
func TestPendingCountsEveryKind(t *testing.T) {
	for _, mode := range []string{config.StoreMemory, config.StoreSQLite} {
		t.Run(mode, func(t *testing.T) {
			h, bob := testHome(t, "alice", func(c *config.Config) { c.Store.Mode = mode })
			m := startTest(t, h, ModeServe)
			arrive(t, m, bob, wire.Response(identity.NewUUID(), wire.StatusCompleted, wire.Null()))
			arrive(t, m, bob, wire.Message("one"))
			b, err := m.Receive(context.Background(), Query{})
			if err != nil || b.Pending != 2 || len(b.Messages) != 2 {
				t.Fatalf("Receive: pending %d, %d items, %v; want 2, 2", b.Pending, len(b.Messages), err)
			}
			st, err := m.Status(context.Background())
			if err != nil || st.Pending != 2 {
				t.Fatalf("Status: pending %d, %v; want 2", st.Pending, err)
			}
			a, err := m.Ack(context.Background(), AckRequest{UpTo: b.Cursor})
			if err != nil || a.Pending != 0 {
				t.Fatalf("Ack: %+v, %v", a, err)
			}
		})
	}
}
