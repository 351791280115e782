package comms

import (
	"testing"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// A response to a request this node never sent is refused (not stored,
// counted as unsolicited); one to a request it sent is stored.
func TestUnsolicitedResponseRefused(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	aliceStillSends(t, a, b)
	b.r.Inbox().Drain()

	aliceOwn := sealEnv(t, a.kp, b.kp.ID(), wire.Request("mine", wire.Null())) // a request alice sent bob
	for name, inReplyTo := range map[string]identity.UUID{
		"random id":              identity.NewUUID(),
		"id of a request to bob": aliceOwn.ID,
	} {
		t.Run(name, func(t *testing.T) {
			before := b.r.Stats()
			c := dialRaw(t, b)
			writeRaw(t, c, frameOf(t, sealEnv(t, a.kp, b.kp.ID(), wire.Response(inReplyTo, wire.StatusCompleted, wire.Int(1)))))
			expectClosedNoAck(t, c)
			if d := rejectedDelta(before, b.r.Stats()); len(d) != 1 || d[RejectUnsolicited] != 1 {
				t.Fatalf("rejected: %v, want one %s", d, RejectUnsolicited)
			}
			if n := b.r.Inbox().Len(); n != 0 {
				t.Fatalf("bob's inbox holds %d items after an unsolicited response", n)
			}
			aliceStillSends(t, a, b)
			b.r.Inbox().Drain()
		})
	}

	t.Run("answer to a request bob sent", func(t *testing.T) {
		req, err := b.r.Seal("alice", wire.Request("ask", wire.Null()))
		if err != nil {
			t.Fatal(err)
		}
		resp := sealEnv(t, a.kp, b.kp.ID(), wire.Response(req.ID, wire.StatusCompleted, wire.Int(2)))
		c := dialRaw(t, b)
		writeRaw(t, c, frameOf(t, resp))
		msg := sealEnv(t, a.kp, b.kp.ID(), wire.Message("after"))
		writeRaw(t, c, frameOf(t, msg))
		readAck(t, c, b.kp.ID(), a.kp.ID(), msg.ID)
		items := b.r.Inbox().Drain()
		if len(items) != 2 || items[0].Envelope.ID != resp.ID {
			t.Fatalf("bob's inbox: %d items, want the response then the message", len(items))
		}
	})
}

// Request ids are recognised by any Router with the node's key (a
// restarted daemon, a command run without one), only for the peer the
// request went to, and never when forged.
func TestRequestIDs(t *testing.T) {
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	other, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	alice, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	alicePeer, carolPeer := alice.ID(), other.ID()
	newRouter := func(kp *identity.Keypair) *Router { return trustingNone(t, kp) }
	r := newRouter(kp)
	id := r.newRequestID(alicePeer)
	if id[6]>>4 != 4 || id[8]>>6 != 2 {
		t.Fatalf("%s is not a version 4 UUID", id)
	}
	if again := newRouter(kp); !again.ownRequestID(id, alicePeer) {
		t.Fatal("a Router with the same key (after a restart) does not recognise the id")
	}
	if r.ownRequestID(id, carolPeer) {
		t.Fatal("an id made for alice is accepted from carol")
	}
	if newRouter(other).ownRequestID(id, alicePeer) {
		t.Fatal("another node's Router accepts the id")
	}
	forged := id
	forged[15] ^= 1
	if r.ownRequestID(forged, alicePeer) {
		t.Fatal("a tampered id is accepted")
	}
	if r.ownRequestID(identity.NewUUID(), alicePeer) {
		t.Fatal("a random id is accepted")
	}
	if a, b := r.newRequestID(alicePeer), r.newRequestID(alicePeer); a == b {
		t.Fatal("two requests got one id")
	}
}
