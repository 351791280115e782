package comms

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Resending one sealed envelope delivers it once and acks it every time.
func TestSealDeliverTwiceDeliversOnce(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	s, err := a.r.Seal("bob", wire.Message("only once"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Peer.Name != "bob" || s.Kind != wire.TypeMessage || s.ID.IsZero() || len(s.Payload) == 0 {
		t.Fatalf("sealed %+v", s)
	}
	var queued atomic.Int32
	for i := range 2 {
		err := a.r.Deliver(ctxT(t), Delivery{To: b.kp.ID(), ID: s.ID, Payload: s.Payload, WantAck: true, Queued: func() { queued.Add(1) }})
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	if n := queued.Load(); n != 2 {
		t.Fatalf("Queued called %d times for 2 deliveries", n)
	}
	if n := b.r.Inbox().Len(); n != 1 {
		t.Fatalf("inbox holds %d, want 1", n)
	}
	if st := b.r.Stats(); st.Accepted != 1 || st.Duplicates != 1 || st.AcksSent != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSealRequestOpensCorrelation(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	s, err := a.r.Seal("bob", wire.Request("ping", wire.Null()))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.r.Deliver(ctxT(t), Delivery{To: b.kp.ID(), ID: s.ID, Payload: s.Payload, WantAck: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.r.SendResponse(ctxT(t), "alice", s.ID, wire.StatusCompleted, wire.Null()); err != nil {
		t.Fatal(err)
	}
	resp, err := a.r.AwaitResponse(ctxT(t), s.ID)
	if err != nil || resp.Kind.Status() != wire.StatusCompleted {
		t.Fatalf("response %v, %v", resp.Kind.Status(), err)
	}
}

func TestSealAndDeliverErrors(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{MaxMessageBytes: 1024})
	if _, err := a.r.Seal("carol", wire.Message("x")); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("unknown peer: %v", err)
	}
	if _, err := a.r.Seal("bob", wire.Message(string(make([]byte, 2000)))); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	if _, err := a.r.Seal("bob", wire.Response(identity.NewUUID(), "maybe", wire.Null())); !errors.Is(err, wire.ErrBadValue) {
		t.Fatalf("bad status: %v", err)
	}
	s, err := a.r.Seal("bob", wire.Message("x"))
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := identity.GenerateKeypair()
	called := false
	err = a.r.Deliver(ctxT(t), Delivery{To: stranger.ID(), ID: s.ID, Payload: s.Payload, WantAck: true, Queued: func() { called = true }})
	if !errors.Is(err, ErrUnknownPeer) || called {
		t.Fatalf("untrusted recipient: %v (queued %v)", err, called)
	}
	// Nobody listens at the peer's address: the attempt fails before
	// anything is queued.
	ghost, _ := identity.GenerateKeypair()
	gl, err := trust.New(trust.Peer{Name: "ghost", ID: ghost.ID(), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: b.addr.Path + ".none"}})
	if err != nil {
		t.Fatal(err)
	}
	a.r.SetTrust(gl)
	gs, err := a.r.Seal("ghost", wire.Message("x"))
	if err != nil {
		t.Fatal(err)
	}
	err = a.r.Deliver(ctxT(t), Delivery{To: ghost.ID(), ID: gs.ID, Payload: gs.Payload, WantAck: true, Queued: func() { called = true }})
	if !errors.Is(err, ErrPeerOffline) || called {
		t.Fatalf("peer not listening: %v (queued %v)", err, called)
	}
}

// Towards a peer that takes one envelope per connection, Queued waits for
// the ack: envelopes on separate connections could overtake each other.
func TestDeliverOneShotQueuedAfterAck(t *testing.T) {
	testutil.CheckGoroutines(t)
	ln, addr := listenOn(t, "uds")
	defer ln.Close()
	peerKP, _ := identity.GenerateKeypair()
	me, _ := identity.GenerateKeypair()
	l, err := trust.New(trust.Peer{Name: "rusty", ID: peerKP.ID(), Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(me, l, Options{AckTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, _ := l.ByName("rusty")
	lk, err := r.link(p)
	if err != nil {
		t.Fatal(err)
	}
	lk.mu.Lock()
	lk.oneShot, lk.oneShotAt = true, time.Now()
	lk.mu.Unlock()

	read := make(chan struct{})
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		payload, err := transport.ReadFrame(c, 0)
		if err != nil {
			return
		}
		close(read)
		<-release
		e, _ := wire.Open(payload)
		ack, _ := wire.Seal(peerKP, identity.NewUUID(), e.From, wire.Ack(e.ID))
		b, _ := ack.MarshalBinary()
		transport.WriteFrame(c, b)
	}()
	s, err := r.Seal("rusty", wire.Message("ordered"))
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.Deliver(ctxT(t), Delivery{To: peerKP.ID(), ID: s.ID, Payload: s.Payload, WantAck: true, Queued: func() { close(queued) }})
	}()
	<-read // the envelope is with the peer, its ack held back
	select {
	case <-queued:
		t.Fatal("Queued called before the one-shot peer acked")
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case <-queued:
	default:
		t.Fatal("Queued not called after the ack")
	}
	wg.Wait()
}

// Observe sees every inbound outcome with what the Router knew.
func TestObserveEvents(t *testing.T) {
	testutil.CheckGoroutines(t)
	var mu sync.Mutex
	var evs []Event
	a, b := pair(t, "uds", Options{Observe: func(e Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() }})
	s, err := a.r.Seal("bob", wire.Message("observed"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := a.r.Deliver(ctxT(t), Delivery{To: b.kp.ID(), ID: s.ID, Payload: s.Payload, WantAck: true}); err != nil {
			t.Fatal(err)
		}
	}
	// A stranger and a garbage frame.
	stranger, _ := identity.GenerateKeypair()
	e, _ := wire.Seal(stranger, identity.NewUUID(), b.kp.ID(), wire.Message("let me in"))
	strangerPayload, _ := e.MarshalBinary()
	for _, payload := range [][]byte{strangerPayload, []byte("not cbor")} {
		c, err := net.Dial("unix", b.addr.Path)
		if err != nil {
			t.Fatal(err)
		}
		transport.WriteFrame(c, payload)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		c.Read(make([]byte, 1)) // the node closes the connection
		c.Close()
	}
	testutil.WaitFor(t, 10*time.Second, "four events", func() bool { mu.Lock(); defer mu.Unlock(); return len(evs) >= 4 })
	mu.Lock()
	defer mu.Unlock()
	type want struct {
		typ, peer, reason string
		from              identity.PeerID
		id                identity.UUID
	}
	wants := []want{
		{EventReceived, "alice", "", a.kp.ID(), s.ID},
		{EventDuplicate, "alice", "", a.kp.ID(), s.ID},
		{EventRefused, "", RejectUntrusted, stranger.ID(), e.ID},
		{EventRefused, "", RejectMalformed, identity.PeerID{}, identity.UUID{}},
	}
	if len(evs) != len(wants) {
		t.Fatalf("%d events: %+v", len(evs), evs)
	}
	for i, w := range wants {
		g := evs[i]
		if g.Type != w.typ || g.Peer != w.peer || g.Reason != w.reason || g.From != w.from || g.ID != w.id || g.Size == 0 {
			t.Errorf("event %d = %+v, want %+v", i, g, w)
		}
	}
	if evs[0].Kind != wire.TypeMessage || evs[0].Fields.Body() != "observed" {
		t.Errorf("received event kind %q body %q", evs[0].Kind, evs[0].Fields.Body())
	}
}

func TestLastSeen(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	if !b.r.LastSeen(a.kp.ID()).IsZero() {
		t.Fatal("seen before any envelope")
	}
	before := time.Now()
	for i := range 2 {
		if _, err := a.r.SendMessage(ctxT(t), "bob", "hello"); err != nil {
			t.Fatal(err)
		}
		got := b.r.LastSeen(a.kp.ID())
		if got.Before(before) || got.After(time.Now()) {
			t.Fatalf("send %d: last seen %v, sent after %v", i, got, before)
		}
		before = got
	}
	stranger, _ := identity.GenerateKeypair()
	if !b.r.LastSeen(stranger.ID()).IsZero() {
		t.Fatal("a key never seen has a time")
	}
}

// An ack that arrives on a connection the peer opened is verified and
// observed (acks are not stored, so this is their only trace).
func TestObserveInboundAck(t *testing.T) {
	testutil.CheckGoroutines(t)
	var mu sync.Mutex
	var evs []Event
	a, b := pair(t, "uds", Options{Observe: func(e Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() }})
	ack, _ := wire.Seal(a.kp, identity.NewUUID(), b.kp.ID(), wire.Ack(identity.NewUUID()))
	payload, _ := ack.MarshalBinary()
	c, err := net.Dial("unix", b.addr.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	transport.WriteFrame(c, payload)
	testutil.WaitFor(t, 10*time.Second, "the ack event", func() bool { mu.Lock(); defer mu.Unlock(); return len(evs) >= 1 })
	mu.Lock()
	defer mu.Unlock()
	if g := evs[0]; g.Type != EventAck || g.Peer != "alice" || g.From != a.kp.ID() || g.Kind != wire.TypeAck || g.Size != len(payload) {
		t.Fatalf("event %+v", g)
	}
}

// A peer whose frame limit is below ours takes an envelope that fits it as
// sealed: the hint rides only on frames within transport.MinFrameLimit, so
// it cannot take one past the peer's limit (it did, and every persistent
// connection then refused that envelope).
func TestHintKeepsFramesWithinAPeersSmallerLimit(t *testing.T) {
	testutil.CheckGoroutines(t)
	const limit = 4096
	akp, bkp := newKP(t), newKP(t)
	lnA, addrA := listenOn(t, "uds")
	bob := serveNode(t, "bob", bkp, "uds", Options{MaxMessageBytes: limit}, trust.Peer{Name: "alice", ID: akp.ID(), Addr: addrA})
	tl, err := trust.New(trust.Peer{Name: "bob", ID: bkp.ID(), Addr: bob.addr})
	if err != nil {
		t.Fatal(err)
	}
	alice, err := New(akp, tl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	serveRouter(t, alice, lnA)
	var body string
	for n := limit; n > 0 && body == ""; n-- {
		s, err := alice.Seal("bob", wire.Message(strings.Repeat("x", n)))
		if err == nil && len(s.Payload) > limit-6 && len(s.Payload) <= limit { // the hint, "acks": 1, takes 6 bytes
			body = strings.Repeat("x", n)
		}
	}
	if body == "" {
		t.Fatal("no message seals to within the hint's size of the peer's limit")
	}
	for i, text := range []string{body, "after", body} {
		if _, err := alice.SendMessage(ctxT(t), "bob", text); err != nil {
			t.Fatalf("message %d: %v (bob refused %v)", i, err, bob.r.Stats().Rejected)
		}
	}
	if rej := bob.r.Stats().Rejected; len(rej) != 0 {
		t.Fatalf("bob refused %v", rej)
	}
}

// Two nodes at the least limit both may set (transport.MinFrameLimit)
// exchange pipelined sends: a node whose limit cannot take a full acks
// envelope does not ask for them (it did, and refused the acks that came
// back, failing the sends on one connection after another).
func TestPipelinedAtTheLeastLimit(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{MaxMessageBytes: transport.MinFrameLimit})
	const n = 100
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := a.r.SendMessage(ctxT(t), "bob", fmt.Sprint("pipelined ", i))
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("%v (bob refused %v, alice %v)", err, b.r.Stats().Rejected, a.r.Stats().Rejected)
		}
	}
	if got := b.r.Inbox().Len(); got != n {
		t.Fatalf("bob holds %d, want %d", got, n)
	}
}

// Envelopes over transport.MinFrameLimit still get acks kinds once the
// peer has acknowledged one as large as the hinted frame: the hint rides
// on a frame no larger than one the peer took.
func TestLargeEnvelopesGetAcksKinds(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	for i := range 6 {
		body := strings.Repeat("x", 2000-10*(i%2)) // a little smaller every other time
		if _, err := a.r.SendMessage(ctxT(t), "bob", body); err != nil {
			t.Fatal(err)
		}
	}
	r := a.r
	r.mu.Lock()
	lk := r.links[b.kp.ID()]
	r.mu.Unlock()
	if !lk.acksKinds.Load() {
		t.Fatal("a stream of 2 KB envelopes never got acks kinds")
	}
	if rej := b.r.Stats().Rejected; len(rej) != 0 {
		t.Fatalf("bob refused %v", rej)
	}
}

// The acks hint on a connection's first frame never takes an envelope past
// the size limit both nodes share: one sealed right at the limit is
// delivered, not refused by the receiver on every new connection.
func TestHintKeepsFramesWithinTheLimit(t *testing.T) {
	testutil.CheckGoroutines(t)
	const limit = 4096
	a, b := pair(t, "uds", Options{MaxMessageBytes: limit})
	var body string
	for n := limit; n > 0; n-- {
		s, err := a.r.Seal("bob", wire.Message(strings.Repeat("x", n)))
		if err == nil && len(s.Payload) == limit {
			body = strings.Repeat("x", n)
			break
		}
	}
	if body == "" {
		t.Fatal("no message seals to exactly the limit")
	}
	for i, text := range []string{body, "after"} {
		if _, err := a.r.SendMessage(ctxT(t), "bob", text); err != nil {
			t.Fatalf("message %d: %v (bob refused %v)", i, err, b.r.Stats().Rejected)
		}
	}
	if rej := b.r.Stats().Rejected; len(rej) != 0 {
		t.Fatalf("bob refused %v", rej)
	}
}
