package comms

import (
	"context"
	"errors"
	"net"
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
	e := seal(t, a.kp, b.kp.ID(), wire.Message("important"))
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
	e := seal(t, a.kp, b.kp.ID(), wire.Message("first"))
	writeRaw(t, c, frameOf(t, e))
	readAck(t, c, b.kp.ID(), a.kp.ID(), e.ID)
	time.Sleep(500 * time.Millisecond) // idle, below IdleTimeout
	var burst []byte
	var ids []identity.UUID
	for range 60 {
		e := seal(t, a.kp, b.kp.ID(), wire.Message("burst"))
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
	one := frameOf(t, seal(t, a.kp, b.kp.ID(), wire.Message("x"))) // a single captured envelope, replayed
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
