package comms

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Acks kinds: a receiver acknowledges many envelopes with one signed
// envelope, but only on a connection whose sender asked for it with the
// unsigned hint; any other sender gets one ack per envelope, as the Rust
// reference expects.

// burst seals n messages from kp to `to` and returns their ids and their
// frames, one after another; the first carries the acks hint if hint.
func burst(t *testing.T, kp *identity.Keypair, to identity.PeerID, n int, hint bool) ([]identity.UUID, []byte) {
	t.Helper()
	var ids []identity.UUID
	var frames []byte
	for i := range n {
		e := sealEnv(t, kp, to, wire.Message("burst"))
		e.AcksHint = hint && i == 0
		ids = append(ids, e.ID)
		frames = append(frames, frameOf(t, e)...)
	}
	return ids, frames
}

// readAcks reads ack frames from c until every id in want is acknowledged
// and returns the envelopes read. It fails on an id acknowledged twice, an
// id not sent, or an ack that does not verify or is not from `from` to
// `to`.
func readAcks(t *testing.T, c net.Conn, from, to identity.PeerID, want []identity.UUID) (acks []wire.Envelope, payloads [][]byte) {
	t.Helper()
	left := map[identity.UUID]bool{}
	for _, id := range want {
		left[id] = true
	}
	c.SetReadDeadline(time.Now().Add(advDeadline))
	for len(left) > 0 {
		payload, err := transport.ReadFrame(c, 0)
		if err != nil {
			t.Fatalf("reading acks (%d of %d left): %v", len(left), len(want), err)
		}
		e, err := wire.Open(payload)
		if err != nil {
			t.Fatalf("an ack does not open: %v", err)
		}
		if e.From != from || e.To != to {
			t.Fatalf("ack from %s to %s, want from %s to %s", e.From.Short(), e.To.Short(), from.Short(), to.Short())
		}
		ids := e.Kind.AckedIDs(nil)
		if len(ids) == 0 {
			t.Fatalf("a frame of kind %q acknowledges nothing", e.Kind.Type())
		}
		for _, id := range ids {
			if !left[id] {
				t.Fatalf("id %s acknowledged twice or never sent", id)
			}
			delete(left, id)
		}
		acks = append(acks, e)
		payloads = append(payloads, bytes.Clone(payload))
	}
	return acks, payloads
}

// TestAcksKindOnlyWhenAsked: a sender that sends the hint gets acks kinds
// for everything on its connection; one that never sends it gets one
// ack per envelope, encoded exactly as before acks kinds existed (five
// members, no hint).
func TestAcksKindOnlyWhenAsked(t *testing.T) {
	testutil.CheckGoroutines(t)
	const n = 40
	for _, hint := range []bool{true, false} {
		name := "never asks"
		if hint {
			name = "asks"
		}
		t.Run(name, func(t *testing.T) {
			a, b := pair(t, "uds", Options{})
			c := dialRaw(t, b)
			ids, frames := burst(t, a.kp, b.kp.ID(), n, hint)
			writeRaw(t, c, frames)
			acks, payloads := readAcks(t, c, b.kp.ID(), a.kp.ID(), ids)
			for i, e := range acks {
				switch {
				case hint && e.Kind.Type() != wire.TypeAcks:
					t.Fatalf("ack %d is a %q, want acks kinds on a connection that asked", i, e.Kind.Type())
				case !hint && e.Kind.Type() != wire.TypeAck:
					t.Fatalf("ack %d is a %q, want one ack per envelope", i, e.Kind.Type())
				}
				if e.AcksHint {
					t.Fatalf("ack %d carries the hint: a receiver never asks", i)
				}
				again, err := e.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again, payloads[i]) || payloads[i][0] != 0xa5 {
					t.Fatalf("ack %d is not in the reference's encoding:\n got %x\nwant %x", i, payloads[i], again)
				}
			}
			if !hint && len(acks) != n {
				t.Fatalf("%d acks for %d envelopes", len(acks), n)
			}
			if got := b.r.Inbox().Len(); got != n {
				t.Fatalf("bob holds %d items, want %d", got, n)
			}
			if s := b.r.Stats(); s.AcksSent != n {
				t.Fatalf("bob counted %d acks, want one per envelope acknowledged (%d)", s.AcksSent, n)
			}
		})
	}
}

// recorder is a connection that keeps a copy of what it reads.
type recorder struct {
	net.Conn
	mu  *sync.Mutex
	got *bytes.Buffer
}

func (r recorder) Read(b []byte) (int, error) {
	n, err := r.Conn.Read(b)
	r.mu.Lock()
	r.got.Write(b[:n])
	r.mu.Unlock()
	return n, err
}

// ackKinds decodes the frames in b and counts them by kind type.
func ackKinds(t *testing.T, b []byte) map[string]int {
	t.Helper()
	kinds := map[string]int{}
	rd := bytes.NewReader(b)
	for rd.Len() > 0 {
		payload, err := transport.ReadFrame(rd, 0)
		if err != nil {
			t.Fatalf("recorded stream: %v", err)
		}
		e, err := wire.Open(payload)
		if err != nil {
			t.Fatalf("recorded frame: %v", err)
		}
		kinds[e.Kind.Type()]++
	}
	return kinds
}

// TestAcksKindBetweenRouters: pipelined sends between two Routers are
// acknowledged with acks kinds, fewer envelopes than sends, every send
// settled; with SingleAcks the sender never asks and gets one ack each.
func TestAcksKindBetweenRouters(t *testing.T) {
	testutil.CheckGoroutines(t)
	const n = 300
	for _, network := range []string{"uds", "tcp", "tls"} {
		for _, single := range []bool{false, true} {
			name := network + "/acks"
			if single {
				name = network + "/single"
			}
			t.Run(name, func(t *testing.T) {
				var mu sync.Mutex
				var got bytes.Buffer
				opts := Options{SingleAcks: single, Dial: func(ctx context.Context, a transport.Addr) (net.Conn, error) {
					c, err := transport.Dial(ctx, a)
					if err != nil {
						return nil, err
					}
					return recorder{c, &mu, &got}, nil
				}}
				a, b := pair(t, network, opts)
				sendAll(t, a.r, "bob", n, func(int) string { return "pipelined" })
				if got := b.r.Inbox().Len(); got != n {
					t.Fatalf("bob holds %d items, want %d", got, n)
				}
				a.r.Close() // nothing more is read: the record is whole
				mu.Lock()
				rec := bytes.Clone(got.Bytes())
				mu.Unlock()
				if network == "tls" {
					return // the record is ciphertext; the counts below are for plain streams
				}
				kinds := ackKinds(t, rec)
				if single {
					if kinds[wire.TypeAck] != n || kinds[wire.TypeAcks] != 0 {
						t.Fatalf("with single acks: %v, want %d acks", kinds, n)
					}
					return
				}
				if kinds[wire.TypeAcks] == 0 || kinds[wire.TypeAck] != 0 || kinds[wire.TypeAcks] >= n {
					t.Fatalf("kinds read by the sender: %v; want only acks kinds, fewer than the %d sends", kinds, n)
				}
			})
		}
	}
}

// TestHintOnlyOnFirstFrame: the hint rides on the first frame of a
// connection only, so later envelopes go out as they were sealed; with
// SingleAcks there is no hint at all.
func TestHintOnlyOnFirstFrame(t *testing.T) {
	testutil.CheckGoroutines(t)
	for _, single := range []bool{false, true} {
		peerKP, r, conns := rawPeer(t, 5*time.Second)
		r.opts.SingleAcks = single
		ctx := ctxT(t)
		done := sendAsync(ctx, r, "first")
		c := <-conns
		e := readEnvelope(t, c)
		if e.AcksHint == single {
			t.Fatalf("single=%v: first envelope's hint is %v", single, e.AcksHint)
		}
		peerWrite(t, c, ackFrameOf(t, peerKP, e))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		done = sendAsync(ctx, r, "second")
		payload, err := transport.ReadFrame(c, 0)
		if err != nil {
			t.Fatal(err)
		}
		e2, err := wire.Open(payload)
		if err != nil {
			t.Fatal(err)
		}
		if e2.AcksHint || payload[0] != 0xa5 {
			t.Fatalf("single=%v: the second envelope carries the hint", single)
		}
		peerWrite(t, c, ackFrameOf(t, peerKP, e2))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		noNewConn(t, conns)
	}
}

// TestAcksKindWithAsyncAdmission: acks of admissions that commit later
// (the SQLite inbox) are gathered into acks kinds too, and sent only once
// each admission is stored.
func TestAcksKindWithAsyncAdmission(t *testing.T) {
	testutil.CheckGoroutines(t)
	ai := &asyncInbox{}
	a, b := pair(t, "uds", Options{Inbox: ai})
	c := dialRaw(t, b)
	const n = 50
	ids, frames := burst(t, a.kp, b.kp.ID(), n, true)
	writeRaw(t, c, frames)
	acks, _ := readAcks(t, c, b.kp.ID(), a.kp.ID(), ids)
	for _, e := range acks {
		if e.Kind.Type() != wire.TypeAcks {
			t.Fatalf("got a %q, want acks kinds", e.Kind.Type())
		}
	}
	ai.mu.Lock()
	defer ai.mu.Unlock()
	if len(ai.stored) != n {
		t.Fatalf("%d admissions stored, want %d", len(ai.stored), n)
	}
}

// authedConn dials n as kp's peer and sends one message alone, reading its
// ack: the connection is then authenticated, and what follows on it is
// verified in batches.
func authedConn(t *testing.T, n *node, kp *identity.Keypair) net.Conn {
	t.Helper()
	c := dialRaw(t, n)
	e := sealEnv(t, kp, n.kp.ID(), wire.Message("first"))
	writeRaw(t, c, frameOf(t, e))
	readAck(t, c, n.kp.ID(), kp.ID(), e.ID)
	return c
}

// TestBatchVerifiedBurst: a burst on an authenticated connection is
// verified as a batch and every envelope admitted.
func TestBatchVerifiedBurst(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	c := authedConn(t, b, a.kp)
	const n = 60
	ids, frames := burst(t, a.kp, b.kp.ID(), n, false)
	writeRaw(t, c, frames)
	readAcks(t, c, b.kp.ID(), a.kp.ID(), ids)
	if got := b.r.Inbox().Len(); got != n+1 {
		t.Fatalf("bob holds %d items, want %d", got, n+1)
	}
	// Batches start at two and double: most of the burst is batched
	// (what one read leaves alone at its end is verified alone).
	if got := b.r.batchVerified.Load(); got < n/2 {
		t.Fatalf("%d of the burst's %d envelopes verified in a batch, want most", got, n)
	}
}

// TestBatchWithABadSignature: in a burst on an authenticated connection,
// the envelopes before a bad signature are admitted and acknowledged, the
// bad one is refused as bad_signature and closes the connection, and
// nothing after it is admitted — as when each is verified alone. The
// connection's batches are 2, 4, 8, 16 (as two halves at once: envelopes
// 14-21 and 22-29) and 10: the bad one in a small batch, in either half.
func TestBatchWithABadSignature(t *testing.T) {
	for _, bad := range []int{5, 17, 25} {
		t.Run(fmt.Sprint("bad at ", bad), func(t *testing.T) { testBatchWithABadSignature(t, bad) })
	}
}

func testBatchWithABadSignature(t *testing.T, bad int) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	c := authedConn(t, b, a.kp)
	const n = 40
	var frames []byte
	var good []identity.UUID
	for i := range n {
		e := sealEnv(t, a.kp, b.kp.ID(), wire.Message("burst"))
		if i == bad {
			e.Sig[3] ^= 1
		} else if i < bad {
			good = append(good, e.ID)
		}
		frames = append(frames, frameOf(t, e)...)
	}
	before := b.r.Stats()
	writeRaw(t, c, frames)
	readAcks(t, c, b.kp.ID(), a.kp.ID(), good)
	expectClosedNoAck(t, c)
	if got := b.r.Inbox().Len(); got != bad+1 {
		t.Fatalf("bob holds %d items, want the %d before the bad signature and the first", got, bad+1)
	}
	after := b.r.Stats()
	if got := after.Rejected[RejectBadSignature] - before.Rejected[RejectBadSignature]; got != 1 {
		t.Fatalf("%d refused as bad signatures, want 1", got)
	}
}

// TestTrustedBadSignaturesCostLittle: a holder of a trusted key who has
// proved it once (a new valid envelope), then sends a burst of bad
// signatures, costs a batch of two and no more: the connection's first
// batch is two envelopes, and a failed batch is checked alone only up to
// its first bad signature, where the connection ends. Over TLS, whose
// handshake proves the key, the same holds for each connection.
func TestTrustedBadSignaturesCostLittle(t *testing.T) {
	testutil.CheckGoroutines(t)
	forged := func(kp *identity.Keypair, to identity.PeerID) []byte {
		var frames []byte
		for range maxBatch {
			e := sealEnv(t, kp, to, wire.Message("forged"))
			e.Sig[3] ^= 1
			frames = append(frames, frameOf(t, e)...)
		}
		return frames
	}
	t.Run("uds", func(t *testing.T) {
		a, b := pair(t, "uds", Options{})
		c := authedConn(t, b, a.kp)
		writeRaw(t, c, forged(a.kp, b.kp.ID()))
		expectClosedNoAck(t, c)
		if got := b.r.batchVerified.Load(); got > 2 {
			t.Fatalf("%d forged envelopes went through a batch, want at most 2", got)
		}
		if got := b.r.Stats().Rejected[RejectBadSignature]; got != 1 {
			t.Fatalf("%d refused as bad signatures, want 1", got)
		}
	})
	t.Run("after small batches", func(t *testing.T) {
		// Batches of two that verify do not grow the next batch past
		// four: only a full batch doubles it.
		a, b := pair(t, "uds", Options{})
		c := authedConn(t, b, a.kp)
		for range 5 {
			ids, frames := burst(t, a.kp, b.kp.ID(), 2, false)
			writeRaw(t, c, frames)
			readAcks(t, c, b.kp.ID(), a.kp.ID(), ids)
		}
		before := b.r.batchVerified.Load()
		writeRaw(t, c, forged(a.kp, b.kp.ID()))
		expectClosedNoAck(t, c)
		if got := b.r.batchVerified.Load() - before; got > 4 {
			t.Fatalf("after five batches of two, %d forged envelopes went through a batch, want at most 4", got)
		}
	})
	t.Run("tls", func(t *testing.T) {
		alice := newKP(t)
		far := transport.Addr{Scheme: transport.SchemeTLS, Host: "127.0.0.1", Port: 1}
		bob := serveNode(t, "bob", newKP(t), "tls", Options{}, trust.Peer{Name: "alice", ID: alice.ID(), Addr: far})
		const conns = 3
		for range conns {
			hc := &testutil.WriteHolder{Conn: dialRaw(t, bob)}
			c, err := dialTLSOver(t, bob, alice, hc)
			if err != nil {
				t.Fatal(err)
			}
			hc.Hold() // the whole burst in one write: one read, one batch
			writeRaw(t, c, forged(alice, bob.kp.ID()))
			if err := hc.Release(); err != nil {
				t.Fatal(err)
			}
			expectClosedNoAck(t, c)
		}
		if got := bob.r.batchVerified.Load(); got > 2*conns {
			t.Fatalf("%d forged envelopes on %d connections went through a batch, want at most %d", got, conns, 2*conns)
		}
		if got := bob.r.Stats().Rejected[RejectBadSignature]; got != conns {
			t.Fatalf("%d refused as bad signatures, want %d", got, conns)
		}
	})
}

// TestHintOfARefusedFrameIgnored: the acks hint counts only on an
// envelope the node took. Here a sender that never hints has an envelope
// admitted (its ack held back by a slow inbox), then a frame follows with
// the hint and a bad signature: the connection ends at it, and the held
// ack still goes out as the reference's single ack.
func TestHintOfARefusedFrameIgnored(t *testing.T) {
	testutil.CheckGoroutines(t)
	g := &gatedInbox{gate: make(chan struct{})}
	a, b := pair(t, "uds", Options{Inbox: g})
	c := dialRaw(t, b)
	e1 := sealEnv(t, a.kp, b.kp.ID(), wire.Message("from a peer that does not hint"))
	e2 := sealEnv(t, a.kp, b.kp.ID(), wire.Message("forged"))
	e2.Sig[40] ^= 1
	e2.AcksHint = true
	writeRaw(t, c, append(frameOf(t, e1), frameOf(t, e2)...))
	testutil.WaitFor(t, 10*time.Second, "the forged frame to be refused", func() bool {
		return b.r.Stats().Rejected[RejectBadSignature] == 1
	})
	close(g.gate)
	readAck(t, c, b.kp.ID(), a.kp.ID(), e1.ID) // fails on an acks kind
	expectClosedNoAck(t, c)
}

// TestStrangerIsNotBatched: on a connection that has not delivered a new
// valid envelope, a burst of forged signatures costs one verification:
// the first is refused alone and the connection closes. No batch runs.
func TestStrangerIsNotBatched(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	c := dialRaw(t, b)
	var frames []byte
	for range 40 {
		e := sealEnv(t, a.kp, b.kp.ID(), wire.Message("forged"))
		e.Sig[0] ^= 1
		frames = append(frames, frameOf(t, e)...)
	}
	writeRaw(t, c, frames)
	expectClosedNoAck(t, c)
	if got := b.r.batchVerified.Load(); got != 0 {
		t.Fatalf("%d forged envelopes went through a batch; a stranger's must be verified alone", got)
	}
	if got := b.r.Stats().Rejected[RejectBadSignature]; got != 1 {
		t.Fatalf("%d refused as bad signatures, want 1 (the connection closes at the first)", got)
	}
}

// TestBatchAckedWhileMoreIsReadAhead: the acks of a batch go out as soon
// as it is admitted, even while the next frame is still arriving: here
// the sender writes a full batch and the start of one more frame, then
// waits for its acks before sending the rest (as a sender whose window is
// full does). The frame timeout is long, so only acks written after the
// batch arrive in time.
func TestBatchAckedWhileMoreIsReadAhead(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{FrameTimeout: time.Hour})
	c := authedConn(t, b, a.kp)
	ids, frames := burst(t, a.kp, b.kp.ID(), maxBatch, true)
	last := frameOf(t, sealEnv(t, a.kp, b.kp.ID(), wire.Message("after the batch")))
	cut := transport.HeaderSize + 8
	writeRaw(t, c, append(frames, last[:cut]...))
	readAcks(t, c, b.kp.ID(), a.kp.ID(), ids)
	writeRaw(t, c, last[cut:])
	e, err := wire.Open(last[transport.HeaderSize:])
	if err != nil {
		t.Fatal(err)
	}
	readAcks(t, c, b.kp.ID(), a.kp.ID(), []identity.UUID{e.ID})
	if got := b.r.Inbox().Len(); got != maxBatch+2 {
		t.Fatalf("bob holds %d items, want %d", got, maxBatch+2)
	}
}

// TestPreparedNoncesOnlyForMeerkatdPeers: a receiver signs the acks kinds
// it sends one envelope at a time with nonces it prepared while waiting
// (valid signatures, not the deterministic ones); a sender that never
// asked for acks kinds gets the deterministic signatures of RFC 8032,
// byte for byte what it got before.
func TestPreparedNoncesOnlyForMeerkatdPeers(t *testing.T) {
	testutil.CheckGoroutines(t)
	const rounds = 20
	for _, hint := range []bool{true, false} {
		t.Run(fmt.Sprintf("asks=%v", hint), func(t *testing.T) {
			a, b := pair(t, "uds", Options{})
			c := dialRaw(t, b)
			prepared := 0
			for i := range rounds {
				e := sealEnv(t, a.kp, b.kp.ID(), wire.Message("one at a time"))
				e.AcksHint = hint && i == 0
				writeRaw(t, c, frameOf(t, e))
				acks, _ := readAcks(t, c, b.kp.ID(), a.kp.ID(), []identity.UUID{e.ID})
				for _, ack := range acks { // each verified by readAcks
					det, err := wire.Seal(b.kp, ack.ID, ack.To, ack.Kind)
					if err != nil {
						t.Fatal(err)
					}
					if det.Sig != ack.Sig {
						prepared++
					}
				}
			}
			switch {
			case !hint && prepared > 0:
				t.Fatalf("%d acks to a sender that never asked for acks kinds are not RFC 8032's deterministic signatures", prepared)
			case hint && prepared == 0:
				t.Fatalf("none of %d acks kinds, one envelope at a time, was signed with a prepared nonce", rounds)
			}
		})
	}
}

// TestSenderPreparesOnlyForMeerkatdPeers: a sender sending one envelope
// at a time signs them with prepared nonces once its peer has answered
// with acks kinds (from the third on: the nonce of the next is made
// while it waits); to a peer answering with single acks, as the Rust
// reference does, every envelope has its deterministic signature.
func TestSenderPreparesOnlyForMeerkatdPeers(t *testing.T) {
	testutil.CheckGoroutines(t)
	const rounds = 8
	for _, acksKinds := range []bool{true, false} {
		t.Run(fmt.Sprintf("acks_kinds=%v", acksKinds), func(t *testing.T) {
			peerKP, r, conns := rawPeer(t, 10*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var c net.Conn
			for i := range rounds {
				if got, want := sendAnswered(ctx, t, r, peerKP, conns, &c, acksKinds), acksKinds && i >= 2; got != want {
					t.Fatalf("envelope %d: signed with a prepared nonce %v, want %v", i, got, want)
				}
			}
		})
	}
}

// TestPreparedNoncesEndWithTheConnection: a peer that answered with acks
// kinds, then is served by an implementation that never does (the same
// key, the same address: a reference peer put in its place), gets
// deterministic signatures from the first envelope of the new
// connection.
func TestPreparedNoncesEndWithTheConnection(t *testing.T) {
	testutil.CheckGoroutines(t)
	peerKP, r, conns := rawPeer(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c net.Conn
	exchange := func(acksKinds bool) bool { return sendAnswered(ctx, t, r, peerKP, conns, &c, acksKinds) }
	prepared := 0
	for range 6 {
		if exchange(true) {
			prepared++
		}
	}
	if prepared == 0 {
		t.Fatal("no envelope to a peer answering with acks kinds was signed with a prepared nonce")
	}

	// The peer goes; the Router sees its connection end.
	c.Close()
	c = nil
	p, _ := r.trust.Load().Lookup(peerKP.ID())
	lk, err := r.link(p)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		lk.mu.Lock()
		gone := lk.conn == nil
		lk.mu.Unlock()
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Router never saw the closed connection end")
		}
	}
	// Closed right after an ack, the connection marked the peer as one
	// that reads one envelope per connection: each send dials again.
	for i := range 6 {
		if exchange(false) {
			t.Fatalf("envelope %d on a new connection, whose peer answers with single acks, signed with a prepared nonce", i)
		}
		c.Close()
		c = nil
	}
}

// sendAnswered sends one message through r to the raw peer of rawPeer,
// reading it on *c (the next of conns when nil) and answering with an
// acks kind or a single ack; it reports whether the envelope was signed
// with a prepared nonce (not RFC 8032's deterministic signature).
func sendAnswered(ctx context.Context, t *testing.T, r *Router, peerKP *identity.Keypair, conns <-chan net.Conn, c *net.Conn, acksKinds bool) (prepared bool) {
	t.Helper()
	sent := make(chan error, 1)
	go func() {
		_, err := r.SendMessage(ctx, "peer", "one at a time")
		sent <- err
	}()
	if *c == nil {
		*c = <-conns
	}
	e := readEnvelope(t, *c)
	kind := wire.Ack(e.ID)
	if acksKinds {
		kind = wire.Acks([]identity.UUID{e.ID})
	}
	writeEnvelope(t, *c, peerKP, r.kp.ID(), kind)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	det, err := wire.Seal(r.kp, e.ID, e.To, e.Kind)
	if err != nil {
		t.Fatal(err)
	}
	return det.Sig != e.Sig
}
