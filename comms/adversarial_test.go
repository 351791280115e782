package comms

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Hostile input against a receiving Router. Every case opens a raw
// connection to bob, sends something a well-behaved peer never sends, and
// checks what bob does with it (close without an ack and count the reason,
// or serve it correctly); after every case alice, a trusted peer, must
// still get a message through.

// advDeadline bounds every read from bob in these tests. Passing cases
// return long before it.
const advDeadline = 10 * time.Second

// dialRaw opens a raw transport connection to n, closed at the end of the
// test.
func dialRaw(t *testing.T, n *node) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	c, err := transport.Dial(ctx, n.addr)
	if err != nil {
		t.Fatalf("dial %s: %v", n.name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// writeRaw writes b to c. A write may fail once the receiver has closed
// the connection: that is what some cases provoke, so it only logs.
func writeRaw(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(advDeadline))
	if _, err := c.Write(b); err != nil {
		t.Logf("write: %v (the receiver may already have closed)", err)
	}
}

// expectClosedNoAck checks that the peer closes c without sending a byte.
func expectClosedNoAck(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(advDeadline))
	var buf [256]byte
	n, err := c.Read(buf[:])
	switch {
	case n > 0:
		t.Fatalf("the receiver sent %d bytes (%x) instead of closing without an ack", n, buf[:n])
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("connection still open after %v", advDeadline)
	case err == nil:
		t.Fatal("zero-byte read without an error")
	}
	// io.EOF, or ECONNRESET when the receiver closed with our bytes unread:
	// both mean closed.
}

// readAck reads one frame from c and checks that it is an ack from `from`
// to `to` of envelope id.
func readAck(t *testing.T, c net.Conn, from, to identity.PeerID, id identity.UUID) wire.Envelope {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(advDeadline))
	payload, err := transport.ReadFrame(c, 0)
	if err != nil {
		t.Fatalf("reading the ack of %s: %v", id, err)
	}
	ack, err := wire.Open(payload)
	if err != nil {
		t.Fatalf("the ack does not open: %v", err)
	}
	got, ok := ack.Kind.InReplyTo()
	if ack.Kind.Type() != wire.TypeAck || !ok || got != id || ack.From != from || ack.To != to {
		t.Fatalf("want an ack of %s from %s to %s, got kind %q in_reply_to %s from %s to %s",
			id, from.Short(), to.Short(), ack.Kind.Type(), got, ack.From.Short(), ack.To.Short())
	}
	return ack
}

// frameOf returns the frame (length prefix and payload) of e.
func frameOf(t *testing.T, e wire.Envelope) []byte {
	t.Helper()
	payload, err := e.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return rawFrame(payload)
}

// rawFrame prefixes payload with its length, without any check.
func rawFrame(payload []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
}

func sealEnv(t *testing.T, kp *identity.Keypair, to identity.PeerID, kind wire.Kind) wire.Envelope {
	t.Helper()
	e, err := wire.Seal(kp, identity.NewUUID(), to, kind)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Minimal CBOR writers for envelopes the wire package refuses to build.
func cborHead(dst []byte, major byte, n uint64) []byte {
	switch {
	case n < 24:
		return append(dst, major<<5|byte(n))
	case n <= 0xff:
		return append(dst, major<<5|24, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(dst, major<<5|25), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(dst, major<<5|26), uint32(n))
	}
}

func cborText(dst []byte, s string) []byte  { return append(cborHead(dst, 3, uint64(len(s))), s...) }
func cborBytes(dst []byte, b []byte) []byte { return append(cborHead(dst, 2, uint64(len(b))), b...) }

// rawEnvelope encodes an envelope map whose id and kind are given as
// already-encoded CBOR items; the signature is 64 zero bytes.
func rawEnvelope(id []byte, from, to identity.PeerID, kind []byte) []byte {
	b := cborHead(nil, 5, 5)
	b = append(cborText(b, "id"), id...)
	b = cborBytes(cborText(b, "from"), from[:])
	b = cborBytes(cborText(b, "to"), to[:])
	b = append(cborText(b, "kind"), kind...)
	return cborBytes(cborText(b, "sig"), make([]byte, 64))
}

// rejectedDelta returns the reject counters that changed from before to
// after, with their increments.
func rejectedDelta(before, after Stats) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range after.Rejected {
		if v != before.Rejected[k] {
			d[k] = v - before.Rejected[k]
		}
	}
	return d
}

// aliceStillSends checks that a trusted peer still gets a message through
// to bob, acknowledged and admitted.
func aliceStillSends(t *testing.T, a, b *node) {
	t.Helper()
	before := b.r.Stats().Accepted
	if _, err := a.r.SendMessage(ctxT(t), "bob", "still there?"); err != nil {
		t.Fatalf("alice's message after the attack: %v", err)
	}
	if got := b.r.Stats().Accepted; got != before+1 {
		t.Fatalf("bob accepted %d envelopes during alice's send, want 1", got-before)
	}
}

func TestAdversarialInput(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{FrameTimeout: 300 * time.Millisecond})
	mallory, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	carol, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	// Alice's link to bob is up before the first attack.
	aliceStillSends(t, a, b)
	b.r.Inbox().Drain()

	// deepKind is a request kind whose params are nested 10000 deep.
	deepKind := func() []byte {
		const depth = 10000
		params := make([]byte, 0, depth+1)
		for range depth {
			params = append(params, 0x81) // array of one item
		}
		params = append(params, 0x00)
		kind := cborHead(nil, 5, 3)
		kind = cborText(cborText(kind, "type"), "request")
		kind = cborText(cborText(kind, "intent"), "deep")
		return append(cborText(kind, "params"), params...)
	}
	nested := func(from identity.PeerID) []byte {
		id := identity.NewUUID()
		return rawEnvelope(cborBytes(nil, id[:]), from, b.kp.ID(), deepKind())
	}

	refused := []struct {
		name   string
		reason string
		input  func(t *testing.T) []byte
	}{
		{"length 0xFFFFFFFF", RejectFrame, func(*testing.T) []byte { return []byte{0xff, 0xff, 0xff, 0xff} }},
		{"length 1 MiB + 1", RejectFrame, func(*testing.T) []byte {
			return binary.BigEndian.AppendUint32(nil, transport.MaxFrameSize+1)
		}},
		{"zero-length frame", RejectFrame, func(*testing.T) []byte { return []byte{0, 0, 0, 0} }},
		{"truncated frame then silence", RejectFrame, func(t *testing.T) []byte {
			f := frameOf(t, sealEnv(t, a.kp, b.kp.ID(), wire.Message("cut short")))
			return f[:len(f)/2] // FrameTimeout (300ms) must end the wait
		}},
		{"garbage bytes", RejectMalformed, func(*testing.T) []byte {
			return rawFrame([]byte("\xff\xfethis is not CBOR\x00\x01"))
		}},
		{"id as text", RejectMalformed, func(*testing.T) []byte {
			kind, err := wire.Message("typed wrong").Value().AppendCanonical(nil)
			if err != nil {
				t.Fatal(err)
			}
			return rawFrame(rawEnvelope(cborText(nil, identity.NewUUID().String()), a.kp.ID(), b.kp.ID(), kind))
		}},
		{"params nested 10000 deep", RejectMalformed, func(*testing.T) []byte { return rawFrame(nested(a.kp.ID())) }},
		{"bad signature", RejectBadSignature, func(t *testing.T) []byte {
			e := sealEnv(t, a.kp, b.kp.ID(), wire.Message("tampered"))
			e.Sig[7] ^= 0x01
			return frameOf(t, e)
		}},
		{"untrusted key", RejectUntrusted, func(t *testing.T) []byte {
			return frameOf(t, sealEnv(t, mallory, b.kp.ID(), wire.Message("let me in")))
		}},
		// From a stranger, the kind is not decoded (trust before work):
		// one nested too deep is refused as untrusted, not malformed.
		{"untrusted key, params nested 10000 deep", RejectUntrusted, func(*testing.T) []byte {
			return rawFrame(nested(mallory.ID()))
		}},
		{"from spoofed as alice", RejectBadSignature, func(t *testing.T) []byte {
			e := sealEnv(t, mallory, b.kp.ID(), wire.Message("it's me, alice"))
			e.From = a.kp.ID()
			return frameOf(t, e)
		}},
		{"to another node", RejectNotForUs, func(t *testing.T) []byte {
			return frameOf(t, sealEnv(t, a.kp, carol.ID(), wire.Message("for carol")))
		}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			before := b.r.Stats()
			c := dialRaw(t, b)
			writeRaw(t, c, tc.input(t))
			expectClosedNoAck(t, c)
			// The reason is counted before the connection is closed.
			after := b.r.Stats()
			if d := rejectedDelta(before, after); !maps.Equal(d, map[string]uint64{tc.reason: 1}) {
				t.Errorf("rejected counters changed by %v, want %s +1", d, tc.reason)
			}
			if after.AcksSent != before.AcksSent || after.Accepted != before.Accepted {
				t.Errorf("acks sent %d→%d, accepted %d→%d: the input was admitted",
					before.AcksSent, after.AcksSent, before.Accepted, after.Accepted)
			}
			if n := b.r.Inbox().Len(); n != 0 {
				t.Errorf("bob's inbox holds %d items", n)
			}
			aliceStillSends(t, a, b)
			b.r.Inbox().Drain()
		})
	}

	// An ack is never acknowledged, and the connection stays usable: the
	// first frame bob writes back is the ack of the message that follows.
	t.Run("ack to bob", func(t *testing.T) {
		before := b.r.Stats()
		c := dialRaw(t, b)
		writeRaw(t, c, frameOf(t, sealEnv(t, a.kp, b.kp.ID(), wire.Ack(identity.NewUUID()))))
		msg := sealEnv(t, a.kp, b.kp.ID(), wire.Message("after the ack"))
		writeRaw(t, c, frameOf(t, msg))
		readAck(t, c, b.kp.ID(), a.kp.ID(), msg.ID)
		after := b.r.Stats()
		if after.AcksSent != before.AcksSent+1 || after.Accepted != before.Accepted+1 {
			t.Errorf("acks sent +%d, accepted +%d; want +1 each (the message only)",
				after.AcksSent-before.AcksSent, after.Accepted-before.Accepted)
		}
		if d := rejectedDelta(before, after); len(d) != 0 {
			t.Errorf("rejected counters changed: %v", d)
		}
		items := b.r.Inbox().Drain()
		if len(items) != 1 || items[0].Envelope.ID != msg.ID {
			t.Fatalf("bob's inbox: %d items, want only the message", len(items))
		}
		c.Close()
		aliceStillSends(t, a, b)
		b.r.Inbox().Drain()
	})

	// A response is delivered but not acknowledged.
	t.Run("response to bob", func(t *testing.T) {
		before := b.r.Stats()
		c := dialRaw(t, b)
		req, err := b.r.Seal("alice", wire.Request("ask", wire.Null())) // bob asked alice
		if err != nil {
			t.Fatal(err)
		}
		resp := sealEnv(t, a.kp, b.kp.ID(), wire.Response(req.ID, wire.StatusCompleted, wire.Int(42)))
		writeRaw(t, c, frameOf(t, resp))
		msg := sealEnv(t, a.kp, b.kp.ID(), wire.Message("after the response"))
		writeRaw(t, c, frameOf(t, msg))
		readAck(t, c, b.kp.ID(), a.kp.ID(), msg.ID)
		after := b.r.Stats()
		if after.AcksSent != before.AcksSent+1 || after.Accepted != before.Accepted+2 {
			t.Errorf("acks sent +%d, accepted +%d; want +1 and +2",
				after.AcksSent-before.AcksSent, after.Accepted-before.Accepted)
		}
		items := b.r.Inbox().Drain()
		if len(items) != 2 || items[0].Envelope.ID != resp.ID || items[1].Envelope.ID != msg.ID {
			t.Fatalf("bob's inbox holds %d items, want the response then the message", len(items))
		}
		got := items[0]
		if n, _ := got.Envelope.Kind.Result().Int(); got.Envelope.Kind.Type() != wire.TypeResponse ||
			got.Envelope.Kind.Status() != wire.StatusCompleted || n != 42 || got.PeerName != "alice" {
			t.Fatalf("delivered response: type %q status %q result %v from %q",
				got.Envelope.Kind.Type(), got.Envelope.Kind.Status(), got.Envelope.Kind.Result(), got.PeerName)
		}
		c.Close()
		aliceStillSends(t, a, b)
		b.r.Inbox().Drain()
	})

	// The same bytes twice on one connection and once more on another:
	// acked every time, delivered once.
	t.Run("replayed envelope", func(t *testing.T) {
		before := b.r.Stats()
		e := sealEnv(t, a.kp, b.kp.ID(), wire.Message("only once"))
		f := frameOf(t, e)
		c1 := dialRaw(t, b)
		writeRaw(t, c1, append(append([]byte(nil), f...), f...))
		readAck(t, c1, b.kp.ID(), a.kp.ID(), e.ID)
		readAck(t, c1, b.kp.ID(), a.kp.ID(), e.ID)
		c2 := dialRaw(t, b)
		writeRaw(t, c2, f)
		readAck(t, c2, b.kp.ID(), a.kp.ID(), e.ID)
		after := b.r.Stats()
		if after.Accepted != before.Accepted+1 || after.Duplicates != before.Duplicates+2 || after.AcksSent != before.AcksSent+3 {
			t.Errorf("accepted +%d, duplicates +%d, acks +%d; want +1, +2, +3",
				after.Accepted-before.Accepted, after.Duplicates-before.Duplicates, after.AcksSent-before.AcksSent)
		}
		items := b.r.Inbox().Drain()
		if len(items) != 1 || items[0].Envelope.ID != e.ID {
			t.Fatalf("bob's inbox holds %d items, want the message once", len(items))
		}
		c1.Close()
		c2.Close()
		aliceStillSends(t, a, b)
		b.r.Inbox().Drain()
	})
}

// A flood of connections beyond MaxConnections: the extra ones are closed
// at once and counted, a peer whose connection is established keeps being
// served, and every slot is released when the flood ends.
func TestConnectionFlood(t *testing.T) {
	testutil.CheckGoroutines(t)
	const maxConns, flood = 64, 2000
	a, b := pair(t, "uds", Options{MaxConnections: maxConns})
	aliceStillSends(t, a, b) // alice's connection holds one slot
	base := b.r.Stats()
	if base.Connections != 1 {
		t.Fatalf("bob has %d inbound connections before the flood, want alice's 1", base.Connections)
	}

	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var dialErr error
	for range flood {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := transport.Dial(ctx, b.addr)
		cancel()
		if err != nil {
			dialErr = err // out of descriptors or backlog: enough
			break
		}
		conns = append(conns, c)
	}
	n := len(conns)
	if n < 4*maxConns {
		t.Fatalf("opened only %d connections (%v): too few to test the limit", n, dialErr)
	}
	if n < flood {
		t.Logf("opened %d connections, then: %v", n, dialErr)
	}
	free := maxConns - base.Connections // slots the flood can take
	wantOverload := uint64(n - free)
	testutil.WaitFor(t, 30*time.Second, "bob to accept the flood", func() bool {
		s := b.r.Stats()
		return s.Rejected[RejectOverload]-base.Rejected[RejectOverload] == wantOverload
	})
	if s := b.r.Stats(); s.Connections != maxConns {
		t.Fatalf("bob tracks %d connections during the flood, want %d", s.Connections, maxConns)
	}

	// Bob stays responsive to alice.
	aliceStillSends(t, a, b)

	// The extra connections were closed; the admitted ones are open. The
	// reads run concurrently: a read whose deadline has passed reports a
	// timeout even when EOF is waiting.
	deadline := time.Now().Add(2 * time.Second)
	const (
		isOpen = iota
		isClosed
		gotData
	)
	states := make(chan int, len(conns))
	for _, c := range conns {
		go func() {
			c.SetReadDeadline(deadline)
			var one [1]byte
			_, err := c.Read(one[:])
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				states <- isOpen
			case err != nil:
				states <- isClosed
			default:
				states <- gotData
			}
		}()
	}
	var closed, open int
	for range conns {
		switch <-states {
		case isOpen:
			open++
		case isClosed:
			closed++
		default:
			t.Error("bob wrote to a flood connection")
		}
	}
	if closed != int(wantOverload) || open != free {
		t.Fatalf("%d flood connections closed and %d open, want %d and %d", closed, open, wantOverload, free)
	}

	for _, c := range conns {
		c.Close()
	}
	conns = nil
	testutil.WaitFor(t, 30*time.Second, "bob to release the flood's slots", func() bool {
		return b.r.Stats().Connections == base.Connections
	})
	// New connections are admitted again.
	c := dialRaw(t, b)
	e := sealEnv(t, a.kp, b.kp.ID(), wire.Message("after the flood"))
	writeRaw(t, c, frameOf(t, e))
	readAck(t, c, b.kp.ID(), a.kp.ID(), e.ID)
	c.Close()
	a.r.Close() // alice's connection goes too
	testutil.WaitFor(t, 30*time.Second, "bob's connections to drop to 0", func() bool {
		return b.r.Stats().Connections == 0
	})
}

// Strangers who each declare a large frame, send most of it and stall
// share strangerFrames frames' worth of payload memory: once it is held,
// the next such frame closes its connection (overload), while a trusted
// peer's authenticated connection is not charged and still delivers a
// large envelope; what the strangers held comes back when they go.
func TestStrangersShareFrameMemory(t *testing.T) {
	testutil.CheckGoroutines(t)
	const frame = 128 << 10       // the largest frame here
	const sent = 100 << 10        // of it, before the stall: past the first 64 KiB
	const charge = frame - 64<<10 // what each holds of the budget
	const held = strangerFrames * frame / charge
	const extra = 16
	a, b := pair(t, "uds", Options{MaxMessageBytes: frame})
	aliceStillSends(t, a, b) // alice's connection is authenticated
	full := b.r.strangers.Free()
	if full != strangerFrames*frame {
		t.Fatalf("budget %d, want %d", full, strangerFrames*frame)
	}
	base := b.r.Stats()
	partial := append(binary.BigEndian.AppendUint32(nil, frame), bytes.Repeat([]byte{0xa5}, sent)...)
	conns := make([]net.Conn, 0, held+extra)
	for range held + extra {
		c := dialRaw(t, b)
		writeRaw(t, c, partial)
		conns = append(conns, c)
	}
	testutil.WaitFor(t, 30*time.Second, "bob to refuse the strangers past the budget", func() bool {
		return b.r.Stats().Rejected[RejectOverload]-base.Rejected[RejectOverload] == extra && b.r.strangers.Free() < charge
	})
	if got := rejectedDelta(base, b.r.Stats()); len(got) != 1 {
		t.Fatalf("refusals %v, want %d overload only", got, extra)
	}
	// Alice's frames are hers: a large envelope goes through meanwhile.
	if _, err := a.r.SendMessage(ctxT(t), "bob", string(bytes.Repeat([]byte("L"), sent))); err != nil {
		t.Fatalf("alice's large message while strangers hold the budget: %v", err)
	}
	for _, c := range conns {
		c.Close()
	}
	testutil.WaitFor(t, 30*time.Second, "the strangers' memory to come back", func() bool {
		return b.r.strangers.Free() == full
	})
}

// A stranger replaying a large envelope it captured (a copy: acked, but
// it authenticates nothing) holds none of the strangers' payload memory
// once the frame is handled, while its connection stays open waiting for
// the next frame: otherwise a few replayers would keep new peers' large
// first envelopes out.
func TestReplayLeavesStrangersBudget(t *testing.T) {
	testutil.CheckGoroutines(t)
	const frame = 128 << 10
	a, b := pair(t, "uds", Options{MaxMessageBytes: frame, FrameTimeout: time.Minute})
	full := b.r.strangers.Free()
	large := sealEnv(t, a.kp, b.kp.ID(), wire.Message(string(bytes.Repeat([]byte("L"), 100<<10))))
	first := dialRaw(t, b)
	writeRaw(t, first, frameOf(t, large))
	readAck(t, first, b.kp.ID(), a.kp.ID(), large.ID)
	replay := dialRaw(t, b)
	writeRaw(t, replay, frameOf(t, large))
	readAck(t, replay, b.kp.ID(), a.kp.ID(), large.ID)
	testutil.WaitFor(t, 10*time.Second, "the replayer's frame memory to come back", func() bool {
		return b.r.strangers.Free() == full
	})
	if b.r.Stats().Connections != 2 {
		t.Errorf("%d connections open, want both raw ones", b.r.Stats().Connections)
	}
}

// A connection authenticated by an envelope whose admission settles
// after its reader went back to wait (ackLoop authenticates it, then
// acks) is no longer charged to the strangers' budget: a large envelope
// its peer sends on seeing the ack goes through while strangers hold the
// whole budget.
func TestAuthenticatedWhileWaitingLeavesBudget(t *testing.T) {
	testutil.CheckGoroutines(t)
	const frame = 128 << 10
	const sent = 100 << 10
	const charge = frame - 64<<10
	g := &gatedInbox{gate: make(chan struct{})}
	a, b := pair(t, "uds", Options{MaxMessageBytes: frame, Inbox: g})
	var opened sync.Once
	open := func() { opened.Do(func() { close(g.gate) }) }
	t.Cleanup(open)
	c := dialRaw(t, b)
	first := sealEnv(t, a.kp, b.kp.ID(), wire.Message("first"))
	writeRaw(t, c, frameOf(t, first))
	testutil.WaitFor(t, 10*time.Second, "the first admission to start", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.started == 1
	})
	open() // ackLoop settles it: authenticates the connection, then acks
	readAck(t, c, b.kp.ID(), a.kp.ID(), first.ID)
	partial := append(binary.BigEndian.AppendUint32(nil, frame), bytes.Repeat([]byte{0xa5}, sent)...)
	for range strangerFrames*frame/charge + 1 {
		writeRaw(t, dialRaw(t, b), partial)
	}
	testutil.WaitFor(t, 30*time.Second, "the strangers to hold the budget", func() bool {
		return b.r.strangers.Free() < charge
	})
	large := sealEnv(t, a.kp, b.kp.ID(), wire.Message(string(bytes.Repeat([]byte("L"), sent))))
	writeRaw(t, c, frameOf(t, large))
	readAck(t, c, b.kp.ID(), a.kp.ID(), large.ID)
	if n := b.r.Stats().Rejected[RejectOverload]; n != 1 {
		t.Errorf("overload refusals %d, want 1 (the stranger past the budget)", n)
	}
}

// A sealed envelope on a direct link, from a trusted peer and validly
// signed, is refused (sealed): boxes travel only through the relay,
// which opens them; on a socket it would be stored unopened.
func TestSealedOnSocketRefused(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	c := dialRaw(t, b)
	writeRaw(t, c, frameOf(t, sealEnv(t, a.kp, b.kp.ID(), wire.SealedKind([]byte("not a real box, but signed")))))
	expectClosedNoAck(t, c)
	if n := b.r.Stats().Rejected[RejectSealed]; n != 1 {
		t.Errorf("sealed refusals %d, want 1", n)
	}
	if n := b.r.Inbox().Len(); n != 0 {
		t.Errorf("the inbox holds %d items, want none", n)
	}
}

// The spec vector "A message" (key A to key B), sent the Rust way — one
// envelope per connection — to a Router holding key B, is acknowledged
// with an ack from B to A and delivered with its unmodelled fields intact.
func TestInteropRustVector(t *testing.T) {
	testutil.CheckGoroutines(t)
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "vectors", "meerkat-wire.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vectors struct {
		Keys map[string]struct {
			Seed   string `json:"seed"`
			Public string `json:"public"`
		} `json:"keys"`
		Derived []struct {
			Name  string `json:"name"`
			ID    string `json:"id"`
			Frame string `json:"frame"`
		} `json:"derived"`
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	hexOf := func(s string) []byte {
		t.Helper()
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	kpB, err := identity.KeypairFromSeed(hexOf(vectors.Keys["B"].Seed))
	if err != nil {
		t.Fatal(err)
	}
	if idB := kpB.ID(); hex.EncodeToString(idB[:]) != vectors.Keys["B"].Public {
		t.Fatalf("key B from its seed is %s, vector says %s", idB, vectors.Keys["B"].Public)
	}
	idA, err := identity.PeerIDFromBytes(hexOf(vectors.Keys["A"].Public))
	if err != nil {
		t.Fatal(err)
	}
	var frame []byte
	var msgID identity.UUID
	for _, v := range vectors.Derived {
		if v.Name == "A message" {
			frame = hexOf(v.Frame)
			if msgID, err = identity.ParseUUID(v.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if frame == nil {
		t.Fatal(`no derived vector "A message"`)
	}

	ln, addr := listenOn(t, "uds")
	// A's address is never dialled: B only answers on A's connection.
	aAddr := transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(filepath.Dir(addr.Path), "a.sock")}
	list, err := trust.New(trust.Peer{Name: "rust-a", ID: idA, Addr: aAddr})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(kpB, list, Options{})
	if err != nil {
		t.Fatal(err)
	}
	serveRouter(t, r, ln)

	c, err := transport.Dial(ctxT(t), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	writeRaw(t, c, frame)
	ack := readAck(t, c, kpB.ID(), idA, msgID)
	if ack.ID == msgID || ack.ID.IsZero() {
		t.Fatalf("the ack reuses id %s", ack.ID)
	}
	c.Close() // the Rust way: one envelope, one ack, close

	items, err := r.Inbox().Wait(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 {
		t.Fatalf("inbox holds %d items, want 1", len(items))
	}
	it := items[0]
	e := it.Envelope
	if e.ID != msgID || e.From != idA || e.To != kpB.ID() || e.Kind.Type() != wire.TypeMessage || e.Kind.Body() != "hello" || it.PeerName != "rust-a" {
		t.Fatalf("delivered id %s from %s to %s kind %q body %q peer %q",
			e.ID, e.From.Short(), e.To.Short(), e.Kind.Type(), e.Kind.Body(), it.PeerName)
	}
	hm, ok := e.Kind.Field("handling_mode")
	if s, isText := hm.Text(); !ok || !isText || s != "queue" {
		t.Fatalf("handling_mode = %v (present %v), want \"queue\"", hm, ok)
	}
	// Re-encoding reproduces the Rust sender's bytes, unknown field included.
	again, err := e.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, frame[transport.HeaderSize:]) {
		t.Fatalf("re-encoded envelope differs from the vector:\n got %x\nwant %x", again, frame[transport.HeaderSize:])
	}
	testutil.WaitFor(t, 10*time.Second, "the connection to be released", func() bool { return r.Stats().Connections == 0 })
	if s := r.Stats(); s.Accepted != 1 || s.AcksSent != 1 || len(s.Rejected) != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Through the relay as on a socket, a stranger's envelope is refused for
// its sender before its kind is decoded: one whose params nest too deep
// is untrusted, where from a trusted peer it is malformed.
func TestRelayRefusesStrangerBeforeItsKind(t *testing.T) {
	a, b := pair(t, "uds", Options{})
	mallory, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	kind := cborHead(nil, 5, 3)
	kind = cborText(cborText(kind, "type"), "request")
	kind = cborText(cborText(kind, "intent"), "deep")
	kind = append(cborText(kind, "params"), bytes.Repeat([]byte{0x81}, 10000)...) // arrays of one, 10000 deep
	kind = append(kind, 0x00)
	for _, tc := range []struct {
		name string
		from identity.PeerID
		want string
	}{
		{"stranger", mallory.ID(), RejectUntrusted},
		{"trusted peer", a.kp.ID(), RejectMalformed},
	} {
		id := identity.NewUUID()
		env := rawEnvelope(cborBytes(nil, id[:]), tc.from, b.kp.ID(), kind)
		if got := b.r.ReceiveRelayed(env)(); got.Reason != tc.want {
			t.Errorf("%s's envelope through the relay: %q, want %q", tc.name, got.Reason, tc.want)
		}
	}
}
