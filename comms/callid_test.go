package comms

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/trust"
)

// trustingNone is a Router with key kp and an empty trust list, closed
// when the test ends.
func trustingNone(t *testing.T, kp *identity.Keypair) *Router {
	t.Helper()
	list, err := trust.New()
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(kp, list, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// A call's id is the same for the same call and peer in every Router
// with the node's key, another for another call, peer or node; it is a
// version 4 UUID, as random ids are.
func TestCallID(t *testing.T) {
	gen := func() *identity.Keypair {
		kp, err := identity.GenerateKeypair()
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	kp, other := gen(), gen()
	alice, carol := gen().ID(), gen().ID()
	newRouter := func(kp *identity.Keypair) *Router { return trustingNone(t, kp) }
	r := newRouter(kp)
	call := []byte("review-pr-7\x00hash of the op and arguments")
	first := r.CallID(call, alice)
	for _, c := range []struct {
		name string
		r    *Router
		call string
		peer identity.PeerID
		same bool
	}{
		{"the same call again", r, string(call), alice, true},
		{"after a restart", newRouter(kp), string(call), alice, true},
		{"to another peer", r, string(call), carol, false},
		{"of the call itself", r, string(call), identity.PeerID{}, false},
		{"another call", r, "review-pr-8\x00hash of the op and arguments", alice, false},
		{"one byte more", r, string(call) + "x", alice, false},
		{"another node", newRouter(other), string(call), alice, false},
	} {
		id := c.r.CallID([]byte(c.call), c.peer)
		if id[6]>>4 != 4 || id[8]>>6 != 2 {
			t.Errorf("%s: %s is not a version 4 UUID", c.name, id)
		}
		if (id == first) != c.same {
			t.Errorf("%s: %s, first %s: want the same %v", c.name, id, first, c.same)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("CallID of an empty call did not panic")
			}
		}()
		r.CallID(nil, alice)
	}()
}

// Without a call, a message's or response's id is time-ordered (version
// 7: ids made later sort after, so a receiver's duplicate filter grows at
// its end); a request's is random (version 4) and tagged as this node's.
func TestEnvelopeIDs(t *testing.T) {
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	r := trustingNone(t, kp)
	peer := identity.PeerID{7}
	var last identity.UUID
	for i := range 50 {
		id := r.envelopeID(peer, wire.TypeMessage, nil)
		if id[6]>>4 != 7 || id[8]>>6 != 2 {
			t.Fatalf("message id %s is not a version 7 UUID", id)
		}
		if i > 0 && bytes.Compare(id[:6], last[:6]) < 0 {
			t.Fatalf("message id %s made after %s sorts before it", id, last)
		}
		last = id
	}
	if id := r.envelopeID(peer, wire.TypeResponse, nil); id[6]>>4 != 7 {
		t.Errorf("response id %s is not a version 7 UUID", id)
	}
	req := r.envelopeID(peer, wire.TypeRequest, nil)
	if req[6]>>4 != 4 || !r.ownRequestID(req, peer) {
		t.Errorf("request id %s: want a version 4 UUID tagged as this node's", req)
	}
}

// A message or request sealed again under one call has the first one's
// id: the peer stores it once and acks both. A request's id is still
// tagged as the node's own, so its response is accepted.
func TestSealCallRetryDeliveredOnce(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	ctx := ctxT(t)
	for _, kind := range []wire.Kind{wire.Message("once"), wire.Request("review", wire.Int(7))} {
		t.Run(kind.Type(), func(t *testing.T) {
			call := []byte("key-" + kind.Type() + "\x00hash")
			before := b.r.Stats().Duplicates
			var id identity.UUID
			for i := range 2 {
				s, err := a.r.SealCall("bob", kind, call)
				if err != nil {
					t.Fatal(err)
				}
				e, err := wire.Open(s.Payload) // decodes and verifies, as a peer does
				if err != nil || e.ID != s.ID {
					t.Fatalf("the sealed envelope: %v, id %s, want %s", err, e.ID, s.ID)
				}
				if i == 0 {
					id = s.ID
				} else if s.ID != id {
					t.Fatalf("sealed again under the call: id %s, first %s", s.ID, id)
				}
				if err := a.r.Deliver(ctx, Delivery{To: b.kp.ID(), ID: s.ID, Payload: s.Payload, WantAck: true}); err != nil {
					t.Fatalf("delivery %d: %v", i+1, err)
				}
			}
			testutil.WaitFor(t, 5*time.Second, "the repeat counted as a duplicate", func() bool { return b.r.Stats().Duplicates == before+1 })
			items := b.r.Inbox().Drain()
			if len(items) != 1 || items[0].Envelope.ID != id {
				t.Fatalf("bob's inbox: %d items, want the envelope once", len(items))
			}
			if kind.Type() != wire.TypeRequest {
				if id != a.r.CallID(call, b.kp.ID()) {
					t.Fatalf("message id %s is not the call's id", id)
				}
				return
			}
			if !a.r.ownRequestID(id, b.kp.ID()) {
				t.Fatal("the request id is not tagged as alice's")
			}
			if _, err := b.r.SendResponse(ctx, "alice", id, wire.StatusCompleted, wire.Int(1)); err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			resp, err := a.r.AwaitResponse(rctx, id)
			if err != nil {
				t.Fatalf("alice's response to the request: %v", err)
			}
			if got, _ := resp.Kind.InReplyTo(); got != id {
				t.Fatalf("response in reply to %s, want %s", got, id)
			}
		})
	}
	if s, err := a.r.Seal("bob", wire.Message("once")); err != nil || s.ID == a.r.CallID([]byte("key-message\x00hash"), b.kp.ID()) {
		t.Fatalf("Seal without a call: %v, id %s: want a random id", err, s.ID)
	}
}
