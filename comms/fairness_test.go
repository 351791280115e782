package comms

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// fairNode starts bob, trusting the raw peers kps, with opts.
func fairNode(t *testing.T, opts Options, kps ...*identity.Keypair) *node {
	t.Helper()
	bob := &node{name: "bob"}
	ln, addr := listenOn(t, "uds")
	bob.addr = addr
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	bob.kp = kp
	var peers []trust.Peer
	for i, p := range kps {
		peers = append(peers, trust.Peer{Name: string(rune('a' + i)), ID: p.ID(), Addr: addr})
	}
	l, err := trust.New(peers...)
	if err != nil {
		t.Fatal(err)
	}
	if bob.r, err = New(kp, l, opts); err != nil {
		t.Fatal(err)
	}
	serveRouter(t, bob.r, ln)
	return bob
}

func newKP(t *testing.T) *identity.Keypair {
	t.Helper()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// ackedOrClosed writes one message from kp to bob on c and reports
// whether it was acknowledged (true) or the connection closed without an
// ack (false).
func ackedOrClosed(t *testing.T, c net.Conn, kp *identity.Keypair, bob *node) bool {
	t.Helper()
	e := sealEnv(t, kp, bob.kp.ID(), wire.Message("flood"))
	writeRaw(t, c, frameOf(t, e))
	c.SetReadDeadline(time.Now().Add(advDeadline))
	payload, err := transport.ReadFrame(c, 0)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("neither an ack nor a close after %v", advDeadline)
		}
		return false
	}
	ack, err := wire.Open(payload)
	if got, _ := ack.Kind.InReplyTo(); err != nil || ack.Kind.Type() != wire.TypeAck || got != e.ID {
		t.Fatalf("want the ack of %s, got %v (%v)", e.ID, ack.Kind.Type(), err)
	}
	return true
}

// TestPeerShareFlood: a trusted peer flooding a small inbox is refused
// (not acked) once it holds its share, while a second peer's messages are
// still acked.
func TestPeerShareFlood(t *testing.T) {
	alice, carol := newKP(t), newKP(t)
	mb := inbox.NewMailbox[Item](100)
	mb.SetShare(inbox.DefaultShare, func(it Item) string { return string(it.Envelope.From[:]) })
	bob := fairNode(t, Options{Inbox: mb}, alice, carol)

	c := dialRaw(t, bob)
	acked := 0
	for i := 0; i < 100; i++ {
		if !ackedOrClosed(t, c, alice, bob) {
			break
		}
		acked++
	}
	if acked != 50 {
		t.Fatalf("the flooder got %d acks, want 50 (its share of 100, alone)", acked)
	}
	if got := bob.r.Stats().Rejected[RejectPeerShare]; got != 1 {
		t.Fatalf("Rejected[%s] = %d, want 1", RejectPeerShare, got)
	}
	c2 := dialRaw(t, bob)
	for i := 0; i < 10; i++ {
		if !ackedOrClosed(t, c2, carol, bob) {
			t.Fatalf("the second peer's message %d was refused while the flooder holds its share", i)
		}
	}
	// The flooder stays refused on a new connection.
	if ackedOrClosed(t, dialRaw(t, bob), alice, bob) {
		t.Fatal("the flooder was admitted past its share")
	}
}

// TestPeerConnectionCap: a peer opening more authenticated connections
// than PeerMaxConnections gets the extra ones closed without an ack; other
// peers still connect, and a closed connection gives the slot back.
func TestPeerConnectionCap(t *testing.T) {
	alice, carol := newKP(t), newKP(t)
	bob := fairNode(t, Options{PeerMaxConnections: 2}, alice, carol)
	c1, c2 := dialRaw(t, bob), dialRaw(t, bob)
	for _, c := range []net.Conn{c1, c2} {
		if !ackedOrClosed(t, c, alice, bob) {
			t.Fatal("a connection within the cap was refused")
		}
	}
	c3 := dialRaw(t, bob)
	writeRaw(t, c3, frameOf(t, sealEnv(t, alice, bob.kp.ID(), wire.Message("third"))))
	expectClosedNoAck(t, c3)
	if got := bob.r.Stats().Rejected[RejectPeerConns]; got != 1 {
		t.Fatalf("Rejected[%s] = %d, want 1", RejectPeerConns, got)
	}
	if !ackedOrClosed(t, dialRaw(t, bob), carol, bob) {
		t.Fatal("another peer was refused")
	}
	// The existing connections still carry alice's messages.
	if !ackedOrClosed(t, c1, alice, bob) {
		t.Fatal("an authenticated connection stopped working")
	}
	c1.Close()
	deadline := time.Now().Add(advDeadline)
	for bob.r.Stats().Connections > 2 { // c2 and carol's
		if time.Now().After(deadline) {
			t.Fatal("the closed connection was not untracked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !ackedOrClosed(t, dialRaw(t, bob), alice, bob) {
		t.Fatal("a slot given back was not reusable")
	}
}

// TestPeerConnectionCapSimultaneous: connections whose first envelopes
// are all being admitted at the same moment cannot exceed the cap
// together; a replayed envelope does not hold a slot.
func TestPeerConnectionCapSimultaneous(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice := newKP(t)
	g := &gatedInbox{gate: make(chan struct{})}
	bob := fairNode(t, Options{PeerMaxConnections: 2, Inbox: g}, alice)
	var open sync.Once
	release := func() { open.Do(func() { close(g.gate) }) }
	t.Cleanup(release) // before bob closes: a failure must not leave admissions held
	const n = 6
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dialRaw(t, bob)
		writeRaw(t, conns[i], frameOf(t, sealEnv(t, alice, bob.kp.ID(), wire.Message("first"))))
	}
	// Every admission is held: the cap must be decided before any
	// authenticates. Two are admitted, the rest refused at once.
	waitRejected(t, bob, RejectPeerConns, n-2)
	release()
	acked := 0
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(advDeadline))
		payload, err := transport.ReadFrame(c, 0)
		if err != nil {
			continue // refused: closed without an ack
		}
		if ack, err := wire.Open(payload); err != nil || ack.Kind.Type() != wire.TypeAck {
			t.Fatalf("connection %d: %v, %v", i, ack.Kind.Type(), err)
		}
		acked++
	}
	if acked != 2 || bob.r.Stats().Rejected[RejectPeerConns] != n-2 {
		t.Fatalf("%d connections acked, %d refused; want 2 and %d", acked, bob.r.Stats().Rejected[RejectPeerConns], n-2)
	}
}

// A replay of an envelope already admitted is acked on a spare
// connection but claims no slot: alice's own connection still gets in.
func TestReplayHoldsNoConnectionSlot(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice := newKP(t)
	bob := fairNode(t, Options{PeerMaxConnections: 1}, alice)
	e := sealEnv(t, alice, bob.kp.ID(), wire.Message("once"))
	c := dialRaw(t, bob)
	writeRaw(t, c, frameOf(t, e))
	readAck(t, c, bob.kp.ID(), alice.ID(), e.ID)
	c.Close()
	deadline := time.Now().Add(advDeadline)
	for bob.r.Stats().Connections > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the closed connection was not untracked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	replay := dialRaw(t, bob)
	writeRaw(t, replay, frameOf(t, e))
	readAck(t, replay, bob.kp.ID(), alice.ID(), e.ID) // a duplicate is acked again
	if !ackedOrClosed(t, dialRaw(t, bob), alice, bob) {
		t.Fatal("the replaying connection took alice's only slot")
	}
}

// TestAcksDoNotKeepConnection: a connection that carries only acks after
// its last message is closed at the idle timeout, however many acks it
// sends; one that never carried a message is closed at the frame timeout.
func TestAcksDoNotKeepConnection(t *testing.T) {
	const frame, idle = time.Second, 2 * time.Second
	alice := newKP(t)
	bob := fairNode(t, Options{FrameTimeout: frame, IdleTimeout: idle}, alice)
	for _, authed := range []bool{true, false} {
		c := dialRaw(t, bob)
		start := time.Now()
		if authed && !ackedOrClosed(t, c, alice, bob) {
			t.Fatal("message refused")
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // acks every 50ms until the connection fails
			defer close(done)
			tk := time.NewTicker(50 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
				}
				e, err := wire.Seal(alice, identity.NewUUID(), bob.kp.ID(), wire.Ack(identity.NewUUID()))
				if err != nil {
					return
				}
				b, _ := e.MarshalBinary()
				c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := c.Write(rawFrame(b)); err != nil {
					return
				}
			}
		}()
		limit := frame
		if authed {
			limit = idle
		}
		// Closed at the limit (with slack for a loaded machine), not kept
		// open by the acks.
		expectClosedBy(t, c, start.Add(limit+3*time.Second), "ack-only connection")
		close(stop)
		<-done
	}
}

// failingInbox fails every admission as a store that cannot write does.
type failingInbox struct{}

func (failingInbox) Push(Item) error {
	return errors.New("store: commit: database or disk is full (13)")
}

// An inbox that takes no envelope now (a command listening for responses
// while no daemon serves the home) refuses it as "not_serving": not a
// store failure, which would send an operator looking at the disk.
func TestNotServingRefusedAsSuch(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice := newKP(t)
	bob := fairNode(t, Options{Inbox: notServing{}}, alice)
	c := dialRaw(t, bob)
	writeRaw(t, c, frameOf(t, sealEnv(t, alice, bob.kp.ID(), wire.Message("while no daemon runs"))))
	expectClosedNoAck(t, c)
	if s := bob.r.Stats(); s.Rejected[RejectNotServing] != 1 || s.Rejected[RejectStore] != 0 {
		t.Fatalf("refusals %v, want one %q", s.Rejected, RejectNotServing)
	}
}

// notServing takes no envelope, as a node that only waits for responses.
type notServing struct{}

func (notServing) Push(Item) error { return fmt.Errorf("only responses: %w", ErrNotServing) }

// An inbox that cannot be written refuses the envelope (no ack) as
// "store", not as a full inbox: the operator's problem, not the agent's.
func TestStoreFailureRefusedAsStore(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice := newKP(t)
	bob := fairNode(t, Options{Inbox: failingInbox{}}, alice)
	c := dialRaw(t, bob)
	writeRaw(t, c, frameOf(t, sealEnv(t, alice, bob.kp.ID(), wire.Message("to a full disk"))))
	expectClosedNoAck(t, c)
	if s := bob.r.Stats(); s.Rejected[RejectStore] != 1 || s.Rejected[RejectInboxFull] != 0 {
		t.Fatalf("refusals %v, want one %q", s.Rejected, RejectStore)
	}
}
