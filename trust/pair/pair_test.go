package pair

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

func mustKP(t *testing.T) *identity.Keypair {
	t.Helper()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func mustAddr(t *testing.T, s string) transport.Addr {
	t.Helper()
	a, err := transport.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// side records what a node's Commit was asked to trust.
type side struct {
	mu    sync.Mutex
	added []trust.Peer
	fail  error
}

func (s *side) commit(p trust.Peer) (trust.Peer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return trust.Peer{}, s.fail
	}
	if _, err := trust.New(p); err != nil { // as a node's trust list would
		return trust.Peer{}, err
	}
	s.added = append(s.added, p)
	return p, nil
}

func (s *side) peers() []trust.Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]trust.Peer(nil), s.added...)
}

// run pairs over an in-memory connection: the initiator's bytes go
// through tamper (if set) on their way to the responder and back.
type fixture struct {
	alice, bob         *identity.Keypair
	aliceAddr, bobAddr transport.Addr
	resp               *Responder
	aSide, bSide       side
	bobName            string // the initiator's own name
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{alice: mustKP(t), bob: mustKP(t),
		aliceAddr: mustAddr(t, "uds:///tmp/alice.sock"), bobAddr: mustAddr(t, "tcp://127.0.0.1:4300"), bobName: "bob"}
	f.resp = NewResponder(f.alice, "alice", f.aSide.commit)
	return f
}

// exchange runs one pairing of bob (initiator) with line; relay, if set,
// sits between them and may rewrite each message.
func (f *fixture) exchange(t *testing.T, line Line, source string, relay func(toResponder bool, m *msg)) (trust.Peer, error, error) {
	t.Helper()
	ci, cr := net.Pipe()
	var respErr error
	var wg sync.WaitGroup
	if relay != nil {
		// bob ↔ relay ↔ alice, the relay rewriting messages both ways.
		ci.Close()
		cr.Close()
		bobEnd, relayB := net.Pipe()
		relayA, aliceEnd := net.Pipe()
		ci, cr = bobEnd, aliceEnd
		wg.Add(2)
		go func() { defer wg.Done(); pump(relayB, relayA, true, relay) }()
		go func() { defer wg.Done(); pump(relayA, relayB, false, relay) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cr.Close()
		respErr = f.resp.Serve(cr, cr, source)
	}()
	peer, err := accept(ci, f.bob, f.bobName, f.bobAddr, line, "", nil, f.bSide.commit)
	ci.Close()
	wg.Wait()
	return peer, err, respErr
}

// pump copies the magic, then JSON lines from src to dst, letting rewrite
// change each message.
func pump(src, dst net.Conn, toResponder bool, rewrite func(bool, *msg)) {
	defer dst.Close()
	br := bufio.NewReader(src)
	if toResponder {
		magic := make([]byte, len(Magic))
		if _, err := io.ReadFull(br, magic); err != nil {
			return
		}
		dst.Write(magic)
	}
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		var m msg
		if json.Unmarshal(line, &m) == nil {
			rewrite(toResponder, &m)
			line, _ = json.Marshal(m)
			line = append(line, '\n')
		}
		if _, err := dst.Write(line); err != nil {
			return
		}
	}
}

func TestPairSuccess(t *testing.T) {
	f := newFixture(t)
	o, err := f.resp.Open(f.aliceAddr, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	peer, err, respErr := f.exchange(t, o.Line, "local", nil)
	if err != nil || respErr != nil {
		t.Fatalf("pairing: %v / responder %v", err, respErr)
	}
	if peer.Name != "alice" || peer.ID != f.alice.ID() || peer.Addr != f.aliceAddr {
		t.Fatalf("bob trusts %+v", peer)
	}
	got := f.aSide.peers()
	if len(got) != 1 || got[0].Name != "bob" || got[0].ID != f.bob.ID() || got[0].Addr != f.bobAddr {
		t.Fatalf("alice trusts %+v", got)
	}
	p, err := o.Wait(context.Background())
	if err != nil || p.ID != f.bob.ID() {
		t.Fatalf("offer Wait: %+v, %v", p, err)
	}
	// The code works once.
	_, err, _ = f.exchange(t, o.Line, "local", nil)
	if !errors.Is(err, ErrNoOffer) {
		t.Fatalf("reused code: %v, want ErrNoOffer", err)
	}
	if n := len(f.bSide.peers()); n != 1 {
		t.Fatalf("bob trusted %d peers after the reuse", n)
	}
}

// Each side trusts the other under the name it offered, made usable
// where the trust list's rule would refuse it: pairing never fails (nor
// uses up the offer) over a name another node chose for itself.
func TestPairUnusableOfferedNames(t *testing.T) {
	f := newFixture(t)
	f.resp = NewResponder(f.alice, "..al ice", f.aSide.commit)
	f.bobName = "_bob"
	o, err := f.resp.Open(f.aliceAddr, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	peer, err, respErr := f.exchange(t, o.Line, "local", nil)
	if err != nil || respErr != nil {
		t.Fatalf("pairing: %v / responder %v", err, respErr)
	}
	if peer.Name != "al-ice" {
		t.Fatalf("bob trusts alice as %q, want al-ice", peer.Name)
	}
	if got := f.aSide.peers(); len(got) != 1 || got[0].Name != "bob" {
		t.Fatalf("alice trusts %+v, want bob", got)
	}
}

func TestPairFailures(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(f *fixture, l *Line)
		relay   func(toResponder bool, m *msg)
		wantErr error
	}{
		{"wrong code", func(f *fixture, l *Line) { l.Code[0] ^= 1 }, nil, ErrNoOffer},
		{"expired", func(f *fixture, l *Line) { f.resp.now = func() time.Time { return time.Now().Add(time.Hour) } }, nil, ErrExpired},
		{"relay swaps the responder's key", nil, func(toResp bool, m *msg) {
			if !toResp && m.Key != "" {
				m.Key = mustKPNoT().ID().String()
			}
		}, ErrBadProof},
		{"relay swaps the initiator's key", nil, func(toResp bool, m *msg) {
			if toResp && m.Key != "" {
				m.Key = mustKPNoT().ID().String()
			}
		}, ErrBadProof},
		{"relay rewrites the initiator's address", nil, func(toResp bool, m *msg) {
			if toResp && m.Addr != "" {
				m.Addr = "tcp://203.0.113.7:4300"
			}
		}, ErrBadProof},
		{"relay renames the responder", nil, func(toResp bool, m *msg) {
			if !toResp && m.Name != "" {
				m.Name = "mallory"
			}
		}, ErrBadProof},
		{"relay replays the responder's MAC under its own nonce", nil, func(toResp bool, m *msg) {
			if !toResp && len(m.Nonce) == nonceSize {
				m.Nonce = make([]byte, nonceSize)
			}
		}, ErrBadProof},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			o, err := f.resp.Open(f.aliceAddr, time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			line := o.Line
			if c.setup != nil {
				c.setup(f, &line)
			}
			_, err, _ = f.exchange(t, line, "203.0.113.9", c.relay)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("initiator error %v, want %v", err, c.wantErr)
			}
			if a, b := f.aSide.peers(), f.bSide.peers(); len(a) != 0 || len(b) != 0 {
				t.Fatalf("trust changed: alice %+v, bob %+v", a, b)
			}
		})
	}
}

func mustKPNoT() *identity.Keypair {
	kp, err := identity.GenerateKeypair()
	if err != nil {
		panic(err)
	}
	return kp
}

// deadlineConn records the last read deadline set on a connection
// (clearing one, with the zero time, is not recorded).
type deadlineConn struct {
	net.Conn
	mu   sync.Mutex
	read time.Time
}

func (d *deadlineConn) SetReadDeadline(t time.Time) error {
	d.note(t)
	return d.Conn.SetReadDeadline(t)
}

func (d *deadlineConn) SetDeadline(t time.Time) error {
	d.note(t)
	return d.Conn.SetDeadline(t)
}

func (d *deadlineConn) note(t time.Time) {
	if t.IsZero() {
		return
	}
	d.mu.Lock()
	d.read = t
	d.mu.Unlock()
}

// lastRead returns the last read deadline set (Serve clears its
// deadline as it returns: not recorded).
func (d *deadlineConn) lastRead() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.read
}

func TestRateLimit(t *testing.T) {
	f := newFixture(t)
	o, err := f.resp.Open(f.aliceAddr, 10*time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	bad := o.Line
	bad.Code[3] ^= 0x40
	for i := range maxAttempts {
		if _, err, _ := f.exchange(t, bad, "198.51.100.1", nil); !errors.Is(err, ErrNoOffer) {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	// Now even the right code is refused from that source…
	if _, err, _ := f.exchange(t, o.Line, "198.51.100.1", nil); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("after %d failures: %v, want ErrRateLimited", maxAttempts, err)
	}
	// A connection from that source that sends the greeting and holds
	// back its hello is answered within limitedHelloWait, not kept for
	// ExchangeTimeout.
	ci, cr := net.Pipe()
	defer ci.Close()
	rec := &deadlineConn{Conn: cr}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- f.resp.Serve(rec, cr, "198.51.100.1") }()
	if _, err := ci.Write([]byte(Magic)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrRateLimited) {
		t.Fatalf("a held-back hello over the limit: %v, want ErrRateLimited", err)
	}
	if d := rec.lastRead(); d.IsZero() || d.Sub(start) > limitedHelloWait+time.Second {
		t.Fatalf("the hello of a limited source was awaited until %v after the greeting, want at most %v", d.Sub(start), limitedHelloWait)
	}
	// …but not from another source, and not after the window.
	o2, err := f.resp.Open(f.aliceAddr, 10*time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err, _ := f.exchange(t, o2.Line, "198.51.100.2", nil); err != nil {
		t.Fatalf("another source: %v", err)
	}
	now := time.Now().Add(attemptWindow + time.Second)
	f.resp.now = func() time.Time { return now }
	if _, err, _ := f.exchange(t, o.Line, "198.51.100.1", nil); err != nil {
		t.Fatalf("after the window: %v", err)
	}
}

func TestResponderCommitFails(t *testing.T) {
	f := newFixture(t)
	f.aSide.fail = errors.New("disk full")
	o, err := f.resp.Open(f.aliceAddr, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err, _ = f.exchange(t, o.Line, "local", nil)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("initiator: %v", err)
	}
	if b := f.bSide.peers(); len(b) != 0 {
		t.Fatalf("bob trusted %+v though alice could not", b)
	}
	if _, err := o.Wait(context.Background()); err == nil {
		t.Fatal("offer reports success")
	}
}

func TestOpenLimits(t *testing.T) {
	f := newFixture(t)
	if _, err := f.resp.Open(f.aliceAddr, -time.Second, ""); err == nil {
		t.Error("negative ttl accepted")
	}
	if _, err := f.resp.Open(f.aliceAddr, MaxTTL+time.Second, ""); err == nil {
		t.Error("ttl over MaxTTL accepted")
	}
	if _, err := f.resp.Open(f.aliceAddr, 0, "bad name!"); err == nil {
		t.Error("invalid name for the peer accepted")
	}
	for i := range maxOffers {
		if _, err := f.resp.Open(f.aliceAddr, 0, ""); err != nil {
			t.Fatalf("offer %d: %v", i, err)
		}
	}
	if _, err := f.resp.Open(f.aliceAddr, 0, ""); err == nil {
		t.Error("more than maxOffers offers open")
	}
	o := func() *Offer {
		for _, o := range f.resp.offers {
			return o
		}
		return nil
	}()
	f.resp.Close(o)
	if _, err := o.Wait(context.Background()); !errors.Is(err, ErrWithdrawn) {
		t.Fatalf("closed offer: %v", err)
	}
}

func TestServeRejectsGarbage(t *testing.T) {
	f := newFixture(t)
	for _, in := range []string{"MKPAIR/2\n", "MKPAIR/1\n{not json}\n", "MKPAIR/1\n" + strings.Repeat("x", 2*maxMsg) + "\n",
		"MKPAIR/1\n{\"offer\":\"zz\"}\n", "MKPAIR/1\n{\"offer\":\"00112233445566778899aabbccddeeff\",\"key\":\"nope\"}\n"} {
		c1, c2 := net.Pipe()
		go func() {
			c1.Write([]byte(in))
			io.Copy(io.Discard, c1)
		}()
		err := f.resp.Serve(c2, c2, "x")
		c1.Close()
		c2.Close()
		if err == nil {
			t.Errorf("input %.40q accepted", in)
		}
	}
}

// Parallel connections from one source get no more tries than sequential
// ones: attempts count when they start.
func TestRateLimitCountsParallelAttempts(t *testing.T) {
	f := newFixture(t)
	o, err := f.resp.Open(f.aliceAddr, 10*time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	bad := o.Line
	bad.Code[3] ^= 0x40
	const n = 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	evaluated := 0
	for range n {
		ci, cr := net.Pipe()
		wg.Add(2)
		go func() { defer wg.Done(); defer cr.Close(); f.resp.Serve(cr, cr, "198.51.100.7") }()
		go func() {
			defer wg.Done()
			defer ci.Close()
			ci.Write([]byte(Magic))
			cn := &conn{r: bufio.NewReader(ci), w: ci}
			id := bad.Code.id()
			cn.send(msg{Offer: hex.EncodeToString(id[:]), Key: f.bob.ID().String(), Name: "bob", Addr: f.bobAddr.String(), Nonce: make([]byte, nonceSize)})
			if m, _ := cn.recv(); m.Error == ErrNoOffer.Error() {
				mu.Lock()
				evaluated++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if evaluated > maxAttempts {
		t.Fatalf("%d guesses from one source were evaluated within one window (limit %d)", evaluated, maxAttempts)
	}
}

// An exchange that reaches its proof after the offer expired is refused:
// the offering side never reports expiry while trust changes.
func TestExpiredDuringExchange(t *testing.T) {
	f := newFixture(t)
	o, err := f.resp.Open(f.aliceAddr, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	late := time.Now().Add(2 * time.Second)
	_, ierr, _ := f.exchange(t, o.Line, "local", func(toResp bool, m *msg) {
		if toResp && m.MAC != nil { // the proof: the offer expires before it arrives
			f.resp.mu.Lock()
			f.resp.now = func() time.Time { return late }
			f.resp.mu.Unlock()
		}
	})
	if !errors.Is(ierr, ErrExpired) {
		t.Fatalf("initiator: %v, want ErrExpired", ierr)
	}
	if a, b := f.aSide.peers(), f.bSide.peers(); len(a)+len(b) != 0 {
		t.Fatalf("trust changed: %v %v", a, b)
	}
}

// The 4 KiB message limit holds even when the listener hands over a
// bigger buffered reader.
func TestMessageLimitOnBufferedStream(t *testing.T) {
	f := newFixture(t)
	ci, cr := net.Pipe()
	defer ci.Close()
	errc := make(chan error, 1)
	go func() { defer cr.Close(); errc <- f.resp.Serve(cr, bufio.NewReaderSize(cr, 16<<10), "x") }()
	go func() {
		ci.Write([]byte(Magic))
		ci.Write([]byte(`{"offer":"00112233445566778899aabbccddeeff","name":"` + strings.Repeat("a", 12<<10) + "\"}\n"))
		bufio.NewReader(ci).ReadString('\n')
	}()
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("a 12 KiB message was parsed (err %v)", err)
	}
}

// A node that pairs over TCP cannot register a Unix socket address.
func TestRemoteInitiatorNeedsTCPAddress(t *testing.T) {
	f := newFixture(t)
	f.bobAddr = mustAddr(t, "uds:///run/something.sock")
	o, err := f.resp.Open(f.aliceAddr, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err, _ := f.exchange(t, o.Line, "203.0.113.5", nil); !errors.Is(err, ErrRefused) {
		t.Fatalf("uds address over tcp: %v", err)
	}
	if len(f.aSide.peers()) != 0 {
		t.Fatal("trusted")
	}
	// A local user (source with its uid) may give a socket address.
	o2, err := f.resp.Open(f.aliceAddr, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err, _ := f.exchange(t, o2.Line, LocalSource+":1000", nil); err != nil {
		t.Fatalf("uds address from a local user: %v", err)
	}
}

// pair offer without a daemon stops its node, and so closes the
// connection, as soon as the offer's Wait returns: the initiator must have
// its answer by then.
func TestOfferDoneAfterAnswer(t *testing.T) {
	for i := range 20 { // the close raced the answer; give it chances
		f := newFixture(t)
		o, err := f.resp.Open(f.aliceAddr, time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		ci, cr := net.Pipe()
		waited := make(chan struct{})
		go func() {
			defer close(waited)
			o.Wait(context.Background())
			cr.Close()
		}()
		served := make(chan error, 1)
		go func() { served <- f.resp.Serve(cr, cr, "local") }()
		peer, err := accept(ci, f.bob, "bob", f.bobAddr, o.Line, "", nil, f.bSide.commit)
		ci.Close()
		<-waited
		if respErr := <-served; err != nil || respErr != nil || peer.ID != f.alice.ID() {
			t.Fatalf("round %d: initiator %+v, %v; responder %v", i, peer, err, respErr)
		}
	}
}

// failWrites passes n writes through, then fails every write.
type failWrites struct {
	net.Conn
	n int
}

func (c *failWrites) Write(b []byte) (int, error) {
	if c.n == 0 {
		return 0, errors.New("connection reset")
	}
	c.n--
	return c.Conn.Write(b)
}

// The connection breaks after the responder trusted the initiator, before
// "done" is written: both sides say that trust may be one-sided.
func TestResponderAnswerLost(t *testing.T) {
	f := newFixture(t)
	o, err := f.resp.Open(f.aliceAddr, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	ci, cr := net.Pipe()
	served := make(chan error, 1)
	go func() {
		defer cr.Close()
		served <- f.resp.Serve(&failWrites{Conn: cr, n: 1}, cr, "local") // the challenge goes out, "done" does not
	}()
	_, err = accept(ci, f.bob, "bob", f.bobAddr, o.Line, "", nil, f.bSide.commit)
	ci.Close()
	respErr := <-served
	if err == nil || !strings.Contains(err.Error(), "no answer after the proof") {
		t.Fatalf("initiator: %v", err)
	}
	if !errors.Is(respErr, ErrUnanswered) {
		t.Fatalf("responder: %v, want ErrUnanswered", respErr)
	}
	peer, werr := o.Wait(context.Background())
	if !errors.Is(werr, ErrUnanswered) || !strings.Contains(werr.Error(), "bob ("+f.bob.ID().String()+") is trusted here") ||
		peer.ID != f.bob.ID() {
		t.Fatalf("offer Wait: %+v, %v", peer, werr)
	}
	if a, b := f.aSide.peers(), f.bSide.peers(); len(a) != 1 || a[0].ID != f.bob.ID() || len(b) != 0 {
		t.Fatalf("alice trusts %+v, bob trusts %+v", a, b)
	}
}

// The other side's error texts come back as this package's errors, the
// rate limit's earlier text included; any other text is a refusal.
func TestRemoteError(t *testing.T) {
	for _, c := range []struct {
		text string
		want error
	}{
		{ErrNoOffer.Error(), ErrNoOffer},
		{ErrExpired.Error(), ErrExpired},
		{ErrRateLimited.Error(), ErrRateLimited},
		{oldRateLimited, ErrRateLimited},
		{"something else", ErrRefused},
	} {
		if got := remoteError(c.text); !errors.Is(got, c.want) {
			t.Errorf("remoteError(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

// An address where something accepts the connection but no offering node
// answers (it hangs, hangs up at once, or answers in another protocol) is
// unreachable, as one where nothing listens: ErrUnreachable, nothing
// trusted.
func TestAcceptSilentAddress(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(c net.Conn)
	}{
		{"hangs", func(c net.Conn) { io.Copy(io.Discard, c) }},
		{"hangs up", func(c net.Conn) { c.Close() }},
		{"speaks HTTP", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
			io.Copy(io.Discard, c)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var wg sync.WaitGroup
			defer wg.Wait()
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				tc.serve(c)
			}()
			f := newFixture(t)
			o, err := f.resp.Open(f.aliceAddr, time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			line := o.Line
			line.Addr = mustAddr(t, "tcp://"+ln.Addr().String())
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err = Accept(ctx, f.bob, f.bobName, f.bobAddr, line, "", nil, f.bSide.commit)
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), ln.Addr().String()) {
				t.Fatalf("accept at a silent address: %v, want ErrUnreachable naming it", err)
			}
			if b := f.bSide.peers(); len(b) != 0 {
				t.Fatalf("trust changed: %+v", b)
			}
		})
	}
}
