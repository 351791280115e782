package comms

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// events collects what a Router reports to Options.Observe.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func (e *events) observe(ev Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) refused(reason string) []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Event
	for _, ev := range e.evs {
		if ev.Type == EventRefused && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// serveNode starts a Router for kp that trusts peers, listening on network.
func serveNode(t *testing.T, name string, kp *identity.Keypair, network string, opts Options, peers ...trust.Peer) *node {
	t.Helper()
	l, err := trust.New(peers...)
	if err != nil {
		t.Fatal(err)
	}
	ln, addr := listenOn(t, network)
	r, err := New(kp, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	serveRouter(t, r, ln)
	return &node{name: name, kp: kp, r: r, addr: addr}
}

// dialTLS runs a TLS handshake with n as the node of kp, expecting n's key.
func dialTLS(t *testing.T, n *node, kp *identity.Keypair) (*tls.Conn, error) {
	t.Helper()
	return dialTLSOver(t, n, kp, dialRaw(t, n))
}

// dialTLSOver is dialTLS over raw, a connection to n.
func dialTLSOver(t *testing.T, n *node, kp *identity.Keypair, raw net.Conn) (*tls.Conn, error) {
	t.Helper()
	cert, err := transport.NodeCert(kp.Signer())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	want := n.kp.ID()
	return transport.TLSClient(ctx, raw, transport.TLSClientConfig(cert, want[:]))
}

// waitRejected waits until n has refused want connections or envelopes
// for reason (the refusal is counted on n's connection goroutine).
func waitRejected(t *testing.T, n *node, reason string, want uint64) {
	t.Helper()
	deadline := time.Now().Add(advDeadline)
	for n.r.Stats().Rejected[reason] < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s refused %d for %q, want %d (stats %+v)", n.name, n.r.Stats().Rejected[reason], reason, want, n.r.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An untrusted key is refused in the handshake: bob never reads the frame
// mallory writes after it.
func TestTLSUntrustedClientRefusedBeforeAnyFrame(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice, mallory := newKP(t), newKP(t)
	var seen events
	bob := serveNode(t, "bob", newKP(t), "tls", Options{Observe: seen.observe},
		trust.Peer{Name: "alice", ID: alice.ID(), Addr: transport.Addr{Scheme: transport.SchemeTLS, Host: "127.0.0.1", Port: 1}})
	c, err := dialTLS(t, bob, mallory)
	if err == nil {
		// A TLS 1.3 client finishes before the server has checked its
		// certificate: the refusal arrives as an alert on the first read.
		writeRaw(t, c, frameOf(t, sealEnv(t, mallory, bob.kp.ID(), wire.Message("let me in"))))
		c.SetReadDeadline(time.Now().Add(advDeadline))
		var buf [64]byte
		if n, rerr := c.Read(buf[:]); rerr == nil || errors.Is(rerr, os.ErrDeadlineExceeded) {
			t.Fatalf("read %d bytes, %v: the connection of an untrusted key is open", n, rerr)
		}
	}
	waitRejected(t, bob, RejectTLS, 1)
	s := bob.r.Stats()
	if s.Accepted != 0 || s.Rejected[RejectUntrusted] != 0 || s.Rejected[RejectMalformed] != 0 || s.Rejected[RejectFrame] != 0 {
		t.Fatalf("bob read a frame from an untrusted TLS client: %+v", s)
	}
	evs := seen.refused(RejectTLS)
	if len(evs) != 1 || evs[0].From != mallory.ID() || evs[0].Peer != "" {
		t.Fatalf("refusal events %+v, want one naming mallory's key as claimed, no peer name", evs)
	}
	// alice, trusted, is admitted over TLS.
	c, err = dialTLS(t, bob, alice)
	if err != nil {
		t.Fatal(err)
	}
	e := sealEnv(t, alice, bob.kp.ID(), wire.Message("hello"))
	writeRaw(t, c, frameOf(t, e))
	readAck(t, c, bob.kp.ID(), alice.ID(), e.ID)
}

// Dialling bob's trusted key at an address where carol (also trusted)
// answers fails in the handshake: carol never gets a frame.
func TestTLSDialRefusesAnotherKeyThanDialled(t *testing.T) {
	testutil.CheckGoroutines(t)
	aliceKP, bobKP := newKP(t), newKP(t)
	carol := serveNode(t, "carol", newKP(t), "tls", Options{}, trust.Peer{Name: "alice", ID: aliceKP.ID(), Addr: transport.Addr{Scheme: transport.SchemeTLS, Host: "127.0.0.1", Port: 1}})
	alice := serveNode(t, "alice", aliceKP, "tls", Options{AckTimeout: 5 * time.Second},
		trust.Peer{Name: "bob", ID: bobKP.ID(), Addr: carol.addr},
		trust.Peer{Name: "carol", ID: carol.kp.ID(), Addr: carol.addr})
	ctx := ctxT(t)
	_, err := alice.r.SendMessage(ctx, "bob", "for bob only")
	var poe *PeerOfflineError
	if !errors.As(err, &poe) || poe.Reason != OfflineTLS || !errors.Is(err, transport.ErrTLSWrongKey) {
		t.Fatalf("send to bob at carol's address: %v, want a TLS failure for the wrong key", err)
	}
	if strings.Count(err.Error(), OfflineTLS) != 1 {
		t.Errorf("%q says %q more than once", err, OfflineTLS)
	}
	waitRejected(t, carol, RejectTLS, 1) // alice aborted the handshake
	if s := carol.r.Stats(); s.Accepted != 0 || carol.r.Inbox().Len() != 0 {
		t.Fatalf("carol admitted something: %+v", s)
	}
	// carol herself is reached at the same address.
	if _, err := alice.r.SendMessage(ctx, "carol", "for carol"); err != nil {
		t.Fatal(err)
	}
	if carol.r.Inbox().Len() != 1 {
		t.Fatalf("carol has %d items", carol.r.Inbox().Len())
	}
}

// A TLS connection carries its certificate's envelopes only: alice cannot
// pass carol's signed envelope on hers.
func TestTLSConnectionCarriesItsPeersEnvelopesOnly(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice, carol := newKP(t), newKP(t)
	far := transport.Addr{Scheme: transport.SchemeTLS, Host: "127.0.0.1", Port: 1}
	bob := serveNode(t, "bob", newKP(t), "tls", Options{},
		trust.Peer{Name: "alice", ID: alice.ID(), Addr: far},
		trust.Peer{Name: "carol", ID: carol.ID(), Addr: far})
	c, err := dialTLS(t, bob, alice)
	if err != nil {
		t.Fatal(err)
	}
	writeRaw(t, c, frameOf(t, sealEnv(t, carol, bob.kp.ID(), wire.Message("carol's words"))))
	expectClosedNoAck(t, c)
	if got := bob.r.Stats().Rejected[RejectTLSPeer]; got != 1 || bob.r.Inbox().Len() != 0 {
		t.Fatalf("bob refused %d for %s and holds %d items; want 1 and 0", got, RejectTLSPeer, bob.r.Inbox().Len())
	}
}

// With RefusePlaintext, TCP takes TLS only, in and out; Unix sockets and
// pairing are unaffected.
func TestRefusePlaintext(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice := newKP(t)
	far := transport.Addr{Scheme: transport.SchemeTCP, Host: "127.0.0.1", Port: 1}
	paired := make(chan struct{}, 1)
	var logged testutil.SyncBuffer
	opts := Options{RefusePlaintext: true, Pairing: func(c net.Conn, _ io.Reader) { paired <- struct{}{} },
		Logger: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	bob := serveNode(t, "bob", newKP(t), "tcp", opts, trust.Peer{Name: "alice", ID: alice.ID(), Addr: far})

	c := dialRaw(t, bob)
	writeRaw(t, c, frameOf(t, sealEnv(t, alice, bob.kp.ID(), wire.Message("in the clear"))))
	expectClosedNoAck(t, c)
	if got := bob.r.Stats().Rejected[RejectPlaintext]; got != 1 || bob.r.Inbox().Len() != 0 {
		t.Fatalf("bob refused %d plaintext connections and holds %d items; want 1 and 0", got, bob.r.Inbox().Len())
	}
	// Said at info (as the docs promise), without a key: none was read.
	if l := logged.String(); !strings.Contains(l, "level=INFO") || !strings.Contains(l, "refused plaintext TCP connections") || strings.Contains(l, "key=") {
		t.Errorf("log after a refused plaintext connection: %q", l)
	}

	// The same port takes TLS.
	tc, err := dialTLS(t, bob, alice)
	if err != nil {
		t.Fatal(err)
	}
	e := sealEnv(t, alice, bob.kp.ID(), wire.Message("sealed"))
	writeRaw(t, tc, frameOf(t, e))
	readAck(t, tc, bob.kp.ID(), alice.ID(), e.ID)

	// And pairing.
	writeRaw(t, dialRaw(t, bob), []byte{PairingByte})
	select {
	case <-paired:
	case <-time.After(advDeadline):
		t.Fatal("a pairing connection was not handed over")
	}

	// A Unix socket takes plaintext frames.
	ubob := serveNode(t, "ubob", newKP(t), "uds", Options{RefusePlaintext: true}, trust.Peer{Name: "alice", ID: alice.ID(), Addr: far})
	uc := dialRaw(t, ubob)
	e = sealEnv(t, alice, ubob.kp.ID(), wire.Message("local"))
	writeRaw(t, uc, frameOf(t, e))
	readAck(t, uc, ubob.kp.ID(), alice.ID(), e.ID)

	// A sender that allows plaintext, dialling bob's tcp:// address, is
	// refused without an ack: its error says that plaintext may be why.
	plain := serveNode(t, "plain", alice, "uds", Options{}, trust.Peer{Name: "bob", ID: bob.kp.ID(), Addr: bob.addr})
	if _, err := plain.r.SendMessage(ctxT(t), "bob", "in the clear again"); err == nil || !strings.Contains(err.Error(), "refuses plaintext TCP") {
		t.Fatalf("send to a peer refusing plaintext: %v; want the hint that it may refuse plaintext", err)
	}

	// Nor does the node dial a tcp:// peer.
	dialled := make(chan transport.Addr, 1)
	sender := serveNode(t, "sender", alice, "uds", Options{RefusePlaintext: true, Dial: func(ctx context.Context, a transport.Addr) (net.Conn, error) {
		dialled <- a
		return transport.Dial(ctx, a)
	}}, trust.Peer{Name: "bob", ID: bob.kp.ID(), Addr: bob.addr})
	_, err = sender.r.SendMessage(ctxT(t), "bob", "not in the clear")
	var poe *PeerOfflineError
	if !errors.As(err, &poe) || poe.Reason != OfflinePlaintext {
		t.Fatalf("send to a tcp:// peer: %v, want %q", err, OfflinePlaintext)
	}
	if _, err := sender.r.Seal("bob", wire.Message("not sealed either")); !errors.Is(err, ErrPlaintextRefused) {
		t.Fatalf("sealing for a tcp:// peer: %v, want ErrPlaintextRefused", err)
	}
	select {
	case a := <-dialled:
		t.Fatalf("the node dialled %s", a)
	default:
	}
}

// Over TLS a batch goes on past the end of a record: envelopes a sender
// wrote in several records, all arrived, are read as one batch and
// acknowledged with one acks envelope, as over a plain socket (a TLS
// read returns one record at a time).
func TestTLSBatchSpansRecords(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice := newKP(t)
	far := transport.Addr{Scheme: transport.SchemeTLS, Host: "127.0.0.1", Port: 1}
	bob := serveNode(t, "bob", newKP(t), "tls", Options{}, trust.Peer{Name: "alice", ID: alice.ID(), Addr: far})
	hc := &testutil.WriteHolder{Conn: dialRaw(t, bob)}
	c, err := dialTLSOver(t, bob, alice, hc)
	if err != nil {
		t.Fatal(err)
	}
	// The first envelope alone, asking for acks kinds.
	first, frame := burst(t, alice, bob.kp.ID(), 1, true)
	writeRaw(t, c, frame)
	readAcks(t, c, bob.kp.ID(), alice.ID(), first)
	const records, perRecord = 4, 10
	var ids []identity.UUID
	hc.Hold()
	for range records {
		rec, frames := burst(t, alice, bob.kp.ID(), perRecord, false)
		ids = append(ids, rec...)
		writeRaw(t, c, frames) // one TLS record each, held
	}
	if err := hc.Release(); err != nil {
		t.Fatal(err)
	}
	acks, _ := readAcks(t, c, bob.kp.ID(), alice.ID(), ids)
	if len(acks) != 1 {
		t.Fatalf("%d acks envelopes for %d envelopes in %d records arrived together, want 1: the batch ended at a record", len(acks), len(ids), records)
	}
}

// A frame cut across two TLS records, the second a moment later, is read
// whole: a batch that ends in the middle of it leaves the rest to the
// next read, under the frame timeout, and nothing is refused.
func TestTLSFrameAcrossRecords(t *testing.T) {
	testutil.CheckGoroutines(t)
	alice := newKP(t)
	far := transport.Addr{Scheme: transport.SchemeTLS, Host: "127.0.0.1", Port: 1}
	var ev events
	bob := serveNode(t, "bob", newKP(t), "tls", Options{Observe: ev.observe}, trust.Peer{Name: "alice", ID: alice.ID(), Addr: far})
	c, err := dialTLS(t, bob, alice)
	if err != nil {
		t.Fatal(err)
	}
	first, frame := burst(t, alice, bob.kp.ID(), 1, true)
	writeRaw(t, c, frame)
	readAcks(t, c, bob.kp.ID(), alice.ID(), first)
	ids, frames := burst(t, alice, bob.kp.ID(), 5, false)
	cut := len(frames) - 40 // inside the last frame
	writeRaw(t, c, frames[:cut])
	time.Sleep(50 * time.Millisecond) // the receiver reads the first record alone
	writeRaw(t, c, frames[cut:])
	readAcks(t, c, bob.kp.ID(), alice.ID(), ids)
	ev.mu.Lock()
	for _, e := range ev.evs {
		if e.Type == EventRefused {
			t.Errorf("refused: %s", e.Reason)
		}
	}
	ev.mu.Unlock()
	if got := bob.r.Inbox().Len(); got != 6 {
		t.Fatalf("bob holds %d items, want 6", got)
	}
}

// weakSigner signs as the small-order key whose encoding is the identity
// point: R = the identity, S = 0 satisfies the verification equation for
// any message, so anyone can produce its "signatures".
type weakSigner struct{}

var weakKey = func() identity.PeerID {
	var id identity.PeerID
	id[0] = 1
	return id
}()

func (weakSigner) Public() crypto.PublicKey { return ed25519.PublicKey(weakKey[:]) }

func (weakSigner) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	sig := make([]byte, ed25519.SignatureSize)
	sig[0] = 1 // R = the identity point, S = 0
	return sig, nil
}

// A small-order key is never taken over TLS, trusted or not: anyone can
// complete a handshake as one, so neither a listener nor a dialler lets it
// stand for a peer.
func TestTLSRefusesSmallOrderKeys(t *testing.T) {
	testutil.CheckGoroutines(t)
	if err := weakKey.Check(); !errors.Is(err, identity.ErrWeakKey) {
		t.Fatalf("the test key: %v, want a small-order key", err)
	}
	weak := trust.Peer{Name: "weak", ID: weakKey, Addr: transport.Addr{Scheme: transport.SchemeTLS, Host: "127.0.0.1", Port: 1}}
	bob := serveNode(t, "bob", newKP(t), "tls", Options{}, weak)
	cert, err := transport.NodeCert(weakSigner{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	want := bob.kp.ID()
	if c, err := transport.TLSClient(ctx, dialRaw(t, bob), transport.TLSClientConfig(cert, want[:])); err == nil {
		c.SetReadDeadline(time.Now().Add(advDeadline))
		var buf [64]byte
		if n, rerr := c.Read(buf[:]); rerr == nil || errors.Is(rerr, os.ErrDeadlineExceeded) {
			t.Fatalf("read %d bytes, %v: the connection of a small-order key is open", n, rerr)
		}
	}
	waitRejected(t, bob, RejectTLS, 1)
	// Dialling it: refused before any connection is made.
	weak.Addr = bob.addr
	alice := serveNode(t, "alice", newKP(t), "tls", Options{}, weak)
	_, err = alice.r.SendMessage(ctxT(t), "weak", "for anyone")
	var poe *PeerOfflineError
	if !errors.As(err, &poe) || poe.Reason != OfflineTLS || !errors.Is(err, identity.ErrWeakKey) {
		t.Fatalf("send to a small-order key: %v, want a TLS failure naming the key", err)
	}
	if s := bob.r.Stats(); s.Rejected[RejectTLS] != 1 {
		t.Fatalf("alice reached bob's listener: %+v", s)
	}
}

// lineCounter counts the log lines a handler gets, by message.
type lineCounter struct {
	mu    sync.Mutex
	lines map[string]int
}

func (l *lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *lineCounter) Handle(_ context.Context, rec slog.Record) error {
	l.mu.Lock()
	if l.lines == nil {
		l.lines = map[string]int{}
	}
	l.lines[rec.Message]++
	l.mu.Unlock()
	return nil
}
func (l *lineCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lineCounter) WithGroup(string) slog.Handler      { return l }

// A stranger with a new key for every connection gets a bounded number
// of log lines, not one per key.
func TestUntrustedKeysLogBounded(t *testing.T) {
	testutil.CheckGoroutines(t)
	var lc lineCounter
	r := &Router{log: slog.New(&lc)}
	for range 200 {
		r.logUntrusted(newKP(t).ID())
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	n := 0
	for msg, c := range lc.lines {
		if strings.Contains(msg, "not in the trust list") {
			n += c
		}
	}
	if n != maxUntrustedLines {
		t.Fatalf("%d lines for 200 keys, want %d", n, maxUntrustedLines)
	}
	// With no other stranger to come, the minute's end (a timer set at
	// the first key left out) counts those left out; only once.
	if c := lc.lines["refused envelopes from more keys not in the trust list; their lines were left out"]; c != 0 {
		t.Fatalf("the count of keys left out came before the minute's end (%d lines)", c)
	}
	lc.mu.Unlock()
	r.rejectMu.Lock()
	start := r.untrustedLog.start
	r.rejectMu.Unlock()
	r.flushUntrusted(start)
	r.flushUntrusted(start)
	lc.mu.Lock()
	if c := lc.lines["refused envelopes from more keys not in the trust list; their lines were left out"]; c != 1 {
		t.Fatalf("%d lines counting the keys left out, want 1", c)
	}
}

// blackhole listens on loopback and accepts connections that it never
// reads nor answers, like `nc -l`; it returns their tls:// address.
func blackhole(t *testing.T) transport.Addr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	port := ln.Addr().(*net.TCPAddr).Port
	return transport.Addr{Scheme: transport.SchemeTLS, Host: "127.0.0.1", Port: uint16(port)}
}

// A tls:// peer whose port accepts but never answers fails as a TLS
// handshake that timed out, naming the address, whichever of the frame
// and ack timeouts ends first: it is no ack timeout.
func TestTLSHandshakeTimeoutNamed(t *testing.T) {
	testutil.CheckGoroutines(t)
	for _, tc := range []struct {
		name       string
		frame, ack time.Duration
		wantWithin string
	}{
		{"frame timeout first", 150 * time.Millisecond, 5 * time.Second, "150ms"},
		{"ack timeout first", 5 * time.Second, 150 * time.Millisecond, "ms"},
		// What is left of a 2 s send, said to the hundredth: 2s or
		// 1.99s, not 1.999s.
		{"rounded", 5 * time.Second, 2 * time.Second, "within "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hole := blackhole(t)
			alice := serveNode(t, "alice", newKP(t), "tls", Options{FrameTimeout: tc.frame, AckTimeout: tc.ack},
				trust.Peer{Name: "bob", ID: newKP(t).ID(), Addr: hole})
			start := time.Now()
			_, err := alice.r.SendMessage(ctxT(t), "bob", "anyone there?")
			var poe *PeerOfflineError
			if !errors.As(err, &poe) || poe.Reason != OfflineTLSTimeout {
				t.Fatalf("send to a blackhole: %v, want reason %q", err, OfflineTLSTimeout)
			}
			msg := err.Error()
			if !strings.Contains(msg, hole.String()) || !strings.Contains(msg, tc.wantWithin) || strings.Contains(msg, OfflineTimeout) || regexp.MustCompile(`within \d+\.\d{3}`).MatchString(msg) {
				t.Fatalf("error %q: want the address %s and the time allowed, and no ack timeout", msg, hole)
			}
			if el := time.Since(start); el > 4*time.Second {
				t.Fatalf("send took %v", el)
			}
		})
	}
}

// A dial that outlasts the send (a SYN nobody answers) fails as a
// connection timeout naming the address.
func TestConnectTimeoutNamed(t *testing.T) {
	testutil.CheckGoroutines(t)
	addr := transport.Addr{Scheme: transport.SchemeTLS, Host: "192.0.2.1", Port: 4200}
	hang := func(ctx context.Context, _ transport.Addr) (net.Conn, error) {
		<-ctx.Done()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
	}
	alice := serveNode(t, "alice", newKP(t), "tls", Options{AckTimeout: 150 * time.Millisecond, Dial: hang},
		trust.Peer{Name: "bob", ID: newKP(t).ID(), Addr: addr})
	_, err := alice.r.SendMessage(ctxT(t), "bob", "anyone there?")
	var poe *PeerOfflineError
	if !errors.As(err, &poe) || poe.Reason != OfflineConnectTimeout || !strings.Contains(err.Error(), addr.String()) {
		t.Fatalf("send over a dial that hangs: %v, want reason %q naming %s", err, OfflineConnectTimeout, addr)
	}
}

// A dial that fails for another reason as the send's time runs out (a
// name that does not resolve) is reported as that failure, not as a
// connect timeout: the outbox tells a name that does not resolve apart.
func TestDialFailureAtDeadlineKept(t *testing.T) {
	testutil.CheckGoroutines(t)
	addr := transport.Addr{Scheme: transport.SchemeTLS, Host: "nowhere.invalid", Port: 4200}
	late := func(ctx context.Context, _ transport.Addr) (net.Conn, error) {
		<-ctx.Done()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "nowhere.invalid", IsNotFound: true}}
	}
	alice := serveNode(t, "alice", newKP(t), "tls", Options{AckTimeout: 150 * time.Millisecond, Dial: late},
		trust.Peer{Name: "bob", ID: newKP(t).ID(), Addr: addr})
	_, err := alice.r.SendMessage(ctxT(t), "bob", "anyone there?")
	var poe *PeerOfflineError
	var dns *net.DNSError
	if !errors.As(err, &poe) || poe.Reason == OfflineConnectTimeout || !errors.As(err, &dns) {
		t.Fatalf("send over a dial that fails to resolve at the deadline: %v, want the name error, not a connect timeout", err)
	}
}

// A node that sends to a TLS peer which does not trust its key is told
// so as a TLS failure: the peer's refusal comes as an alert after a TLS
// 1.3 client has finished its handshake, not as a connection closed
// before the ack.
func TestTLSRefusedClientToldSo(t *testing.T) {
	testutil.CheckGoroutines(t)
	aliceKP := newKP(t)
	bob := serveNode(t, "bob", newKP(t), "tls", Options{}) // trusts nobody
	alice := serveNode(t, "alice", aliceKP, "tls", Options{AckTimeout: 5 * time.Second},
		trust.Peer{Name: "bob", ID: bob.kp.ID(), Addr: bob.addr})
	_, err := alice.r.SendMessage(ctxT(t), "bob", "do you know me?")
	var poe *PeerOfflineError
	if !errors.As(err, &poe) || poe.Reason != OfflineTLS || !strings.Contains(err.Error(), "may not trust this node's key") {
		t.Fatalf("send to a TLS peer that does not trust alice: %v, want a TLS failure saying so", err)
	}
	if strings.Count(err.Error(), OfflineTLS) != 1 {
		t.Errorf("%q says %q more than once", err, OfflineTLS)
	}
}

// A read error is a TLS refusal only when the peer's TLS sent an alert;
// one about this node's certificate says the peer may not trust its key.
func TestTLSRefused(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   error
		tls   bool
		trust bool
	}{
		{"bad certificate", &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}, true, true},
		{"certificate required", &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, true, true},
		{"internal error", &net.OpError{Op: "remote error", Err: errors.New("tls: internal error")}, true, false},
		{"end of stream", io.EOF, false, false},
		{"reset", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, false, false},
	} {
		err := tlsRefused(c.err)
		var te *tlsError
		if errors.As(err, &te) != c.tls || errors.Is(err, errConnLost) == c.tls {
			t.Errorf("%s: %v; want a TLS refusal %v", c.name, err, c.tls)
		}
		if strings.Contains(err.Error(), "may not trust this node's key") != c.trust {
			t.Errorf("%s: %v; want 'may not trust' %v", c.name, err, c.trust)
		}
	}
}

// recordLog keeps every record it is given.
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) Handle(_ context.Context, rec slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, rec.Clone())
	l.mu.Unlock()
	return nil
}
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordLog) WithGroup(string) slog.Handler      { return l }

// A refusal for lack of room is logged with the sender's key, at most once
// a minute per reason and sender, the next line counting those left out;
// other reasons go to debug.
func TestRefusedForRoomLogBounded(t *testing.T) {
	var rl recordLog
	r := &Router{log: slog.New(&rl)}
	a, b := newKP(t).ID(), newKP(t).ID()
	for range 5 {
		r.logRefused(RejectInboxFull, a)
	}
	r.logRefused(RejectInboxFull, b)
	r.logRefused(RejectPeerShare, a)
	r.logRefused(RejectBadSignature, a)
	// A minute later the next line says how many were left out.
	r.rejectMu.Lock()
	r.refusedLogged.last[refusedKey{RejectInboxFull, a}].at = time.Now().Add(-2 * untrustedLogEvery)
	r.rejectMu.Unlock()
	r.logRefused(RejectInboxFull, a)

	type line struct {
		level slog.Level
		key   string
		held  int64
	}
	var got []line
	rl.mu.Lock()
	for _, rec := range rl.recs {
		l := line{level: rec.Level}
		rec.Attrs(func(at slog.Attr) bool {
			switch at.Key {
			case "key":
				l.key = at.Value.String()
			case "not_logged_before":
				l.held = at.Value.Int64()
			}
			return true
		})
		got = append(got, l)
	}
	rl.mu.Unlock()
	want := []line{
		{slog.LevelWarn, a.String(), 0}, // inbox full, a: the first of five
		{slog.LevelWarn, b.String(), 0}, // inbox full, b
		{slog.LevelWarn, a.String(), 0}, // share, a
		{slog.LevelDebug, a.String(), 0},
		{slog.LevelWarn, a.String(), 4}, // inbox full, a, a minute on: four left out
	}
	if !slices.Equal(got, want) {
		t.Fatalf("log lines %+v, want %+v", got, want)
	}
}
