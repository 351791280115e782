package comms

import (
	"context"
	"errors"
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

func trustOne(t *testing.T, name string, id identity.PeerID, a transport.Addr) *trust.List {
	t.Helper()
	l, err := trust.New(trust.Peer{Name: name, ID: id, Addr: a})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// R1: a send that resolved the peer before SetTrust re-creates the link
// with the old address; every later send uses it.
func TestReviewStaleLinkAfterSetTrust(t *testing.T) {
	a, b := pair(t, "uds", Options{AckTimeout: 2 * time.Second})
	oldAddr := transport.Addr{Scheme: transport.SchemeUDS, Path: "/nonexistent/old.sock"}
	a.r.SetTrust(trustOne(t, "bob", b.kp.ID(), oldAddr))
	p, _ := a.r.ResolvePeer("bob") // a sender resolves (old address)...
	// ...then the trust file is fixed: bob is at b.addr.
	a.r.SetTrust(trustOne(t, "bob", b.kp.ID(), b.addr))
	if _, err := a.r.link(p); err != nil { // ...then the sender creates the link
		t.Fatal(err)
	}
	_, err := a.r.SendMessage(ctxT(t), "bob", "hi")
	if err != nil {
		t.Fatalf("send after trust fix: %v (link addr %v)", err, a.r.links[b.kp.ID()].peer.Addr)
	}
}

// R2: link.connect does not check l.closed, so a send racing with
// SetTrust (or a closed link) creates a connection nobody will close;
// Router.Close then waits for its readLoop until the peer hangs up.
func TestReviewOrphanConnBlocksClose(t *testing.T) {
	ln, addr := listenOn(t, "uds")
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c // hold it open, never close (a peer without idle timeout)
		}
	}()
	peerKP, _ := identity.GenerateKeypair()
	me, _ := identity.GenerateKeypair()
	r, _ := New(me, trustOne(t, "p", peerKP.ID(), addr), Options{AckTimeout: time.Second})
	p, _ := r.ResolvePeer("p")
	lk, _ := r.link(p)
	r.mu.Lock()
	delete(r.links, p.ID) // SetTrust dropped it (between link.send's closed check and connect)
	r.mu.Unlock()
	lk.close()
	if _, err := lk.connect(context.Background()); !errors.Is(err, errLinkClosed) {
		t.Fatalf("connect on a closed link: %v, want errLinkClosed", err)
	}
	done := make(chan struct{})
	go func() { r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("Router.Close still blocked after 20s (orphan readLoop)")
	}
}

// R3: connect holds link.mu across Dial, with the caller's ctx, not the
// Router's: Close (and SetTrust) wait for a hanging dial.
func TestReviewCloseWaitsForDial(t *testing.T) {
	peerKP, _ := identity.GenerateKeypair()
	me, _ := identity.GenerateKeypair()
	addr := transport.Addr{Scheme: transport.SchemeTCP, Host: "127.0.0.1", Port: 4200} // never dialled: Dial is the fake below
	dialing := make(chan struct{})
	var once sync.Once
	r, _ := New(me, trustOne(t, "p", peerKP.ID(), addr), Options{
		AckTimeout: 4 * time.Second,
		Dial: func(ctx context.Context, a transport.Addr) (net.Conn, error) {
			once.Do(func() { close(dialing) })
			<-ctx.Done() // a black-holed host
			return nil, ctx.Err()
		},
	})
	go r.SendMessage(context.Background(), "p", "x")
	<-dialing
	// Neither SetTrust nor Close may wait for the hanging dial: the dial
	// blocks until its context ends, and with the 4 s ack timeout that
	// context is far from over. Bounded waits detect a hang, not speed.
	returned := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-dialReturned(r):
			t.Fatalf("%s waited for the hanging dial", what)
		}
	}
	returned("SetTrust", func() {
		r.SetTrust(trustOne(t, "p", peerKP.ID(), transport.Addr{Scheme: transport.SchemeTCP, Host: "127.0.0.1", Port: 1}))
	})
	returned("Close", func() { r.Close() })
}

// dialReturned is closed when the fake dial's context would have ended on
// its own (the ack timeout), i.e. when a wait "for the dial" would return.
func dialReturned(r *Router) <-chan time.Time {
	return time.After(r.opts.AckTimeout - 500*time.Millisecond)
}

// R4: a copy arriving while the first copy's admission is still running
// is refused (not acked: the first may yet fail); the first is stored and
// acked once.
type gateAdmitter struct {
	entered chan struct{}
	release chan error
	mu      sync.Mutex
	items   []Item
}

func (g *gateAdmitter) Push(it Item) error {
	g.entered <- struct{}{}
	if err := <-g.release; err != nil {
		return err
	}
	g.mu.Lock()
	g.items = append(g.items, it)
	g.mu.Unlock()
	return nil
}

func TestReviewDuplicateWhileFirstAdmissionRuns(t *testing.T) {
	g := &gateAdmitter{entered: make(chan struct{}, 4), release: make(chan error, 4)}
	a, b := pair(t, "uds", Options{Inbox: g})
	e := sealEnv(t, a.kp, b.kp.ID(), wire.Message("important"))
	c1 := dialRaw(t, b)
	writeRaw(t, c1, frameOf(t, e))
	<-g.entered // copy 1 is being admitted
	c2 := dialRaw(t, b)
	writeRaw(t, c2, frameOf(t, e)) // the sender's retry
	expectClosedNoAck(t, c2)
	g.release <- nil // copy 1 is stored
	readAck(t, c1, b.kp.ID(), a.kp.ID(), e.ID)
	g.mu.Lock()
	n := len(g.items)
	g.mu.Unlock()
	if n != 1 {
		t.Fatalf("stored %d times, want 1", n)
	}
	if got := b.r.Stats().Rejected[RejectInFlight]; got != 1 {
		t.Fatalf("in-flight refusals %d, want 1", got)
	}
}

// R5: acks beyond bufio's 4 KiB are flushed implicitly by bw.Write with the
// write deadline of the previous explicit flush, which may have passed.
func TestReviewImplicitAckFlushStaleDeadline(t *testing.T) {
	a, b := pair(t, "uds", Options{AckTimeout: 200 * time.Millisecond, IdleTimeout: 10 * time.Second})
	c := dialRaw(t, b)
	e := sealEnv(t, a.kp, b.kp.ID(), wire.Message("first"))
	writeRaw(t, c, frameOf(t, e))
	readAck(t, c, b.kp.ID(), a.kp.ID(), e.ID)
	time.Sleep(500 * time.Millisecond) // idle, below IdleTimeout
	var burst []byte
	var ids []identity.UUID
	for range 60 {
		e := sealEnv(t, a.kp, b.kp.ID(), wire.Message("burst"))
		ids = append(ids, e.ID)
		burst = append(burst, frameOf(t, e)...)
	}
	writeRaw(t, c, burst)
	got := 0
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	for range ids {
		if _, err := transport.ReadFrame(c, 0); err != nil {
			t.Logf("after %d acks: %v", got, err)
			break
		}
		got++
	}
	if got != len(ids) {
		t.Fatalf("stored %d, acked %d of %d burst envelopes; stats %+v", b.r.Inbox().Len()-1, got, len(ids), b.r.Stats())
	}
}

// R6: a send in flight when SetTrust changes the peer's address fails with
// ErrClosed (internal error / exit 1), not PeerOffline, and is not retried.
func TestReviewSetTrustFailsInflightWithErrClosed(t *testing.T) {
	ln, addr := listenOn(t, "uds")
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // read, never ack
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	peerKP, _ := identity.GenerateKeypair()
	me, _ := identity.GenerateKeypair()
	r, _ := New(me, trustOne(t, "p", peerKP.ID(), addr), Options{AckTimeout: 5 * time.Second})
	defer r.Close()
	errc := make(chan error, 1)
	go func() { _, err := r.SendMessage(context.Background(), "p", "x"); errc <- err }()
	<-accepted // the send is in flight on its connection
	r.SetTrust(trustOne(t, "p", peerKP.ID(), transport.Addr{Scheme: transport.SchemeUDS, Path: "/x/y.sock"}))
	err := <-errc
	if !errors.Is(err, ErrPeerOffline) {
		t.Fatalf("in-flight send after trust reload: %v (ErrClosed=%v)", err, errors.Is(err, ErrClosed))
	}
}

// R7: concurrent sends to a one-envelope-per-connection peer.
func TestReviewOneShotConcurrent(t *testing.T) {
	for _, nw := range []string{"tcp", "uds"} {
		t.Run(nw, func(t *testing.T) { oneShotConcurrent(t, nw) })
	}
}

func oneShotConcurrent(t *testing.T, nw string) {
	ln, addr := listenOn(t, nw)
	peerKP, _ := identity.GenerateKeypair()
	me, _ := identity.GenerateKeypair()
	r, _ := New(me, trustOne(t, "rusty", peerKP.ID(), addr), Options{AckTimeout: 5 * time.Second})
	defer r.Close()
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				payload, err := transport.ReadFrame(c, 0)
				if err != nil {
					return
				}
				e, err := wire.Open(payload)
				if err != nil {
					return
				}
				ack, _ := wire.Seal(peerKP, identity.NewUUID(), e.From, wire.Ack(e.ID))
				b, _ := ack.MarshalBinary()
				transport.WriteFrame(c, b)
			}()
		}
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fails []error
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.SendMessage(ctxT(t), "rusty", "m"); err != nil {
				mu.Lock()
				fails = append(fails, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	lk := r.links[peerKP.ID()]
	lk.mu.Lock()
	t.Logf("oneShot=%v", lk.oneShot)
	lk.mu.Unlock()
	if len(fails) > 0 {
		for _, e := range fails[:min(3, len(fails))] {
			var poe *PeerOfflineError
			if errors.As(e, &poe) {
				t.Logf("%v / %v", poe.Reason, poe.Err)
			}
		}
		t.Fatalf("%d of 40 concurrent sends failed, first: %v", len(fails), fails[0])
	}
}

// R8: a send that times out while its frame is still queued (peer not
// reading) is reported offline, but the frame may be written later.
// (documented by reasoning only)

// R9: a peer that pipelines and never reads: serveConn blocks in an
// implicit ack flush with no write deadline; Close only sets read deadlines.
func TestReviewCloseHangsOnUnreadAcks(t *testing.T) {
	a, b := pair(t, "uds", Options{AckTimeout: time.Second})
	c := dialRaw(t, b)
	var burst []byte
	one := frameOf(t, sealEnv(t, a.kp, b.kp.ID(), wire.Message("x"))) // a single captured envelope, replayed
	for range 6000 {
		burst = append(burst, one...)
	}
	go func() {
		c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		c.Write(burst)
	}()
	// Wait until bob is busy acking replays the client never reads.
	testutil.WaitFor(t, 20*time.Second, "bob to process replays", func() bool { return b.r.Stats().Duplicates > 100 })
	done := make(chan struct{})
	go func() { b.r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Errorf("Router.Close blocked > 20s (serveConn stuck writing acks with no deadline)")
		c.Close()
		<-done
	}
}

func TestReviewRaceStress(t *testing.T) {
	for iter := range 5 {
		a, b := pair(t, "uds", Options{AckTimeout: 2 * time.Second})
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					a.r.SendMessage(context.Background(), "bob", "m")
					id, err := a.r.SendRequest(context.Background(), "bob", "i", wire.Null())
					if err == nil {
						b.r.SendResponse(context.Background(), "alice", id, wire.StatusCompleted, wire.Null())
					}
					a.r.Spawn(context.Background(), func(ctx context.Context) (wire.Value, string, error) { return wire.Null(), "", nil })
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				addr := b.addr
				if i%2 == 1 {
					addr = transport.Addr{Scheme: transport.SchemeUDS, Path: "/nonexistent/x.sock"}
				}
				a.r.SetTrust(trustOne(t, "bob", b.kp.ID(), addr))
				time.Sleep(time.Millisecond)
			}
		}()
		time.Sleep(300 * time.Millisecond)
		sock := transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(sockDir(t), "late.sock")}
		go func() {
			// Serve racing Close; a listener that fails to open (not the
			// point here) just skips the race, and t.Fatal must not be
			// called off the test goroutine.
			if ln, err := transport.Listen(context.Background(), sock); err == nil {
				a.r.Serve(ln)
			}
		}()
		done := make(chan struct{})
		go func() { a.r.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("iter %d: Close hung", iter)
		}
		close(stop)
		wg.Wait()
		b.r.Close()
	}
}

// Idle limits of inbound connections, for the tests below: small enough
// to wait for, far enough apart to tell which one closed a connection.
const (
	idleTestFrame = 300 * time.Millisecond
	idleTestIdle  = 1500 * time.Millisecond
)

// expectOpenUntil checks that c is still open (no byte, no end of stream)
// at t.
func expectOpenUntil(t *testing.T, c net.Conn, at time.Time, what string) {
	t.Helper()
	c.SetReadDeadline(at)
	var buf [64]byte
	n, err := c.Read(buf[:])
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: connection not open as long as it should be (read %d bytes, %v)", what, n, err)
	}
}

// expectClosedBy checks that the receiver closes c, without sending a
// byte, before `by`, and returns when it saw the close.
func expectClosedBy(t *testing.T, c net.Conn, by time.Time, what string) time.Time {
	t.Helper()
	c.SetReadDeadline(by)
	var buf [64]byte
	n, err := c.Read(buf[:])
	switch {
	case n > 0:
		t.Fatalf("%s: the receiver sent %d bytes instead of closing", what, n)
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("%s: connection still open at the limit", what)
	case err == nil:
		t.Fatalf("%s: zero-byte read without an error", what)
	}
	return time.Now()
}

// An authenticated connection waits the idle timeout between
// frames, even when the envelope that authenticated it was still being
// committed (asynchronously, as the SQLite store does) when the reader
// chose how long to wait for the next frame. It used to be cut at the
// frame timeout (10 s by default instead of 60 s).
func TestReviewAuthenticatedIdleTimeout(t *testing.T) {
	testutil.CheckGoroutines(t)
	g := &gatedInbox{gate: make(chan struct{})}
	a, b := pair(t, "uds", Options{Inbox: g, FrameTimeout: idleTestFrame, IdleTimeout: idleTestIdle})
	e := sealEnv(t, a.kp, b.kp.ID(), wire.Message("hello")) // before the dial: the frame timeout runs from it
	c := dialRaw(t, b)
	start := time.Now()
	writeRaw(t, c, frameOf(t, e))
	testutil.WaitFor(t, 10*time.Second, "the admission to start", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.started == 1
	})
	// The commit takes a while, as a store's does: the reader has long
	// gone back to waiting for the next frame when it completes.
	time.Sleep(idleTestFrame / 3)
	close(g.gate)
	readAck(t, c, b.kp.ID(), a.kp.ID(), e.ID)
	expectOpenUntil(t, c, start.Add(800*time.Millisecond), "authenticated, idle past the frame timeout")
	closed := expectClosedBy(t, c, start.Add(3*time.Second), "authenticated, idle past the idle timeout")
	// The receiver's wait began after our write, so its close cannot
	// come sooner than this.
	if d := closed.Sub(start); d < idleTestIdle {
		t.Fatalf("closed %v after the envelope, before the idle timeout %v", d, idleTestIdle)
	}
	testutil.WaitFor(t, 10*time.Second, "bob to drop the connection", func() bool { return b.r.Stats().Connections == 0 })
}

// A connection that has not delivered a new valid envelope
// keeps the short limit: one that sends nothing, and one that only
// replays an envelope already stored (it gets the ack again, but a
// captured envelope earns no idle time).
func TestReviewUnauthenticatedIdleTimeout(t *testing.T) {
	testutil.CheckGoroutines(t)
	g := &gatedInbox{gate: make(chan struct{})}
	close(g.gate) // admissions complete at once
	a, b := pair(t, "uds", Options{Inbox: g, FrameTimeout: idleTestFrame, IdleTimeout: idleTestIdle})

	t.Run("silent", func(t *testing.T) {
		// Before the dial: the receiver's wait starts once it accepts,
		// which can be before dialRaw returns here.
		start := time.Now()
		c := dialRaw(t, b)
		closed := expectClosedBy(t, c, start.Add(idleTestIdle), "silent connection")
		if d := closed.Sub(start); d < idleTestFrame {
			t.Fatalf("closed after %v, before the frame timeout %v", d, idleTestFrame)
		}
	})
	t.Run("replay only", func(t *testing.T) {
		e := sealEnv(t, a.kp, b.kp.ID(), wire.Message("once"))
		first := dialRaw(t, b)
		writeRaw(t, first, frameOf(t, e))
		readAck(t, first, b.kp.ID(), a.kp.ID(), e.ID)
		c := dialRaw(t, b)
		start := time.Now()
		writeRaw(t, c, frameOf(t, e))
		readAck(t, c, b.kp.ID(), a.kp.ID(), e.ID)
		expectClosedBy(t, c, start.Add(idleTestIdle), "replaying connection")
		expectOpenUntil(t, first, start.Add(idleTestFrame*2), "the authenticated connection beside it")
	})
}

// A direct send whose pooled connection the peer closes before
// the ack (an idle cut racing the send) goes on over a fresh connection;
// a peer that closes on the envelope every time still fails it, after
// the second connection. (Direct sends already had this second try;
// the test keeps it, since the idle cut made it a common path.)
func TestReviewPooledConnClosedBeforeAck(t *testing.T) {
	testutil.CheckGoroutines(t)
	t.Run("second connection acks", func(t *testing.T) {
		peerKP, r, conns := rawPeer(t, 10*time.Second)
		done := sendAsync(ctxT(t), r, "first")
		c1 := <-conns
		first := readEnvelope(t, c1)
		peerWrite(t, c1, ackFrameOf(t, peerKP, first))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		done = sendAsync(ctxT(t), r, "second")
		second := readEnvelope(t, c1) // on the pooled connection
		c1.Close()                    // the peer cuts it before the ack
		c2 := <-conns
		if again := readEnvelope(t, c2); again.ID != second.ID {
			t.Fatalf("the fresh connection carried %s, want the same envelope %s", again.ID, second.ID)
		}
		peerWrite(t, c2, ackFrameOf(t, peerKP, second))
		if err := <-done; err != nil {
			t.Fatalf("send failed although the fresh connection acked it: %v", err)
		}
	})
	t.Run("peer closes every time", func(t *testing.T) {
		peerKP, r, conns := rawPeer(t, 10*time.Second)
		done := sendAsync(ctxT(t), r, "first")
		c1 := <-conns
		peerWrite(t, c1, ackFrameOf(t, peerKP, readEnvelope(t, c1)))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		done = sendAsync(ctxT(t), r, "refused")
		readEnvelope(t, c1)
		c1.Close()
		c2 := <-conns
		readEnvelope(t, c2)
		c2.Close()
		var poe *PeerOfflineError
		if err := <-done; !errors.As(err, &poe) || poe.Reason != OfflineClosed {
			t.Fatalf("send: %v, want a PeerOfflineError (closed)", err)
		}
		noNewConn(t, conns)
	})
}

// A peer whose entry changes only in whether NATS is tried gets a new
// link that follows it (the NATS fallback reads the link's entry), both
// when SetTrust applies the list and when a send finds it changed.
func TestLinkFollowsTheNATSFlag(t *testing.T) {
	testutil.CheckGoroutines(t)
	me, _ := identity.GenerateKeypair()
	bob, _ := identity.GenerateKeypair()
	addr := transport.Addr{Scheme: transport.SchemeUDS, Path: "/nonexistent/bob.sock"}
	list := func(nats bool) *trust.List {
		l, err := trust.New(trust.Peer{Name: "bob", ID: bob.ID(), Addr: addr, NATS: nats})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	r, err := New(me, list(false), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, nats := range []bool{true, false, true} {
		p, _ := r.Trust().Lookup(bob.ID())
		before, err := r.link(p)
		if err != nil {
			t.Fatal(err)
		}
		r.SetTrust(list(nats))
		p, _ = r.Trust().Lookup(bob.ID())
		after, err := r.link(p)
		if err != nil {
			t.Fatal(err)
		}
		if after == before || after.peer.NATS != nats {
			t.Fatalf("after the NATS flag became %v: same link %v, link's flag %v", nats, after == before, after.peer.NATS)
		}
		// A list stored without SetTrust (a send that finds it changed).
		r.trust.Store(list(!nats))
		again, err := r.link(p)
		if err != nil {
			t.Fatal(err)
		}
		if again == after || again.peer.NATS != !nats {
			t.Fatalf("a send after the flag became %v: same link %v, link's flag %v", !nats, again == after, again.peer.NATS)
		}
		r.SetTrust(list(nats))
	}
}
