package comms

import (
	"testing"

	"github.com/meerkatd/meerkatd/comms/seal"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// TestSealedBeforeSetRelay: a sealed envelope the relay delivers before
// SetRelay has returned (a JetStream consumer starts with what the stream
// stored while the node was away) is opened and admitted, not refused as
// sealed: refused, the broker would drop it, and the sender's resend would
// be taken for a duplicate until the stream's window passed.
func TestSealedBeforeSetRelay(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	bob, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	natsAddr, err := transport.ParseAddr("nats:")
	if err != nil {
		t.Fatal(err)
	}
	list, err := trust.New(trust.Peer{Name: "alice", ID: alice.ID(), Addr: natsAddr})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(bob, list, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	inner := sealEnv(t, alice, bob.ID(), wire.Message("stored while bob was away"))
	innerBytes, err := inner.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	box, err := seal.Seal(bob.ID(), seal.Info(alice.ID(), bob.ID(), inner.ID), innerBytes)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := wire.Seal(alice, inner.ID, bob.ID(), wire.SealedKind(box))
	if err != nil {
		t.Fatal(err)
	}
	outerBytes, err := outer.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	res := r.ReceiveRelayed(outerBytes)()
	if res.Reason != "" || res.Ack == nil {
		t.Fatalf("a sealed envelope before SetRelay: refused %q, ack %v", res.Reason, res.Ack != nil)
	}
	items := r.Inbox().Drain()
	if len(items) != 1 || items[0].Envelope.Kind.Body() != "stored while bob was away" {
		t.Fatalf("inbox: %d items", len(items))
	}
}
