package comms

import (
	"context"
	"testing"

	"github.com/meerkatd/meerkatd/comms/seal"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// nopRelay is a Relay that carries nothing: it lets a Router open sealed
// envelopes in a test without a broker.
type nopRelay struct{}

func (nopRelay) Send(context.Context, identity.PeerID, identity.UUID, []byte, bool, func()) ([]byte, bool, error) {
	return nil, false, context.Canceled
}

// FuzzReceiveRelayed: whatever arrives through the relay, nothing panics,
// and what is admitted is a valid envelope from the trusted key, never
// the outer sealed envelope itself.
func FuzzReceiveRelayed(f *testing.F) {
	alice, err := identity.KeypairFromSeed(make([]byte, 32))
	if err != nil {
		f.Fatal(err)
	}
	bobSeed := make([]byte, 32)
	bobSeed[0] = 1
	bob, err := identity.KeypairFromSeed(bobSeed)
	if err != nil {
		f.Fatal(err)
	}
	natsAddr, _ := transport.ParseAddr("nats:")
	list, err := trust.New(trust.Peer{Name: "alice", ID: alice.ID(), Addr: natsAddr})
	if err != nil {
		f.Fatal(err)
	}
	plain, _ := wire.Seal(alice, identity.NewUUID(), bob.ID(), wire.Message("hi"))
	plainBytes, _ := plain.MarshalBinary()
	inner, _ := wire.Seal(alice, identity.NewUUID(), bob.ID(), wire.Message("sealed hi"))
	innerBytes, _ := inner.MarshalBinary()
	box, err := seal.Seal(bob.ID(), seal.Info(alice.ID(), bob.ID(), inner.ID), innerBytes)
	if err != nil {
		f.Fatal(err)
	}
	outer, _ := wire.Seal(alice, inner.ID, bob.ID(), wire.SealedKind(box))
	outerBytes, _ := outer.MarshalBinary()
	f.Add(plainBytes)
	f.Add(outerBytes)
	f.Add(innerBytes[:len(innerBytes)/2])
	f.Add([]byte{0xa0})
	f.Fuzz(func(t *testing.T, payload []byte) {
		r, err := New(bob, list, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if err := r.SetRelay(nopRelay{}); err != nil {
			t.Fatal(err)
		}
		res := r.ReceiveRelayed(payload)()
		items := r.Inbox().Drain()
		if len(items) > 1 {
			t.Fatalf("one payload admitted %d items", len(items))
		}
		if res.Reason != "" && (len(items) != 0 || res.Ack != nil) {
			t.Fatalf("refused (%s) yet admitted %d or acked", res.Reason, len(items))
		}
		for _, it := range items {
			e := it.Envelope
			if e.From != alice.ID() || e.To != bob.ID() || e.Verify() != nil {
				t.Fatalf("admitted an envelope that does not verify from alice: %+v", e)
			}
			if _, sealed := e.Kind.Box(); sealed {
				t.Fatal("admitted the sealed envelope rather than what it holds")
			}
			if res.Ack == nil {
				t.Fatal("admitted a message without an ack")
			}
		}
	})
}
