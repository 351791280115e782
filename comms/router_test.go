package comms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// node is a Router under test with its listener address.
type node struct {
	name string
	kp   *identity.Keypair
	r    *Router
	addr transport.Addr
}

func sockDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "mkc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// listenOn opens a listener of the given network ("uds", "tcp" or "tls":
// a TCP listener that peers reach at a tls:// address).
func listenOn(t testing.TB, network string) (net.Listener, transport.Addr) {
	t.Helper()
	var a transport.Addr
	if network == "uds" {
		a = transport.Addr{Scheme: transport.SchemeUDS, Path: filepath.Join(sockDir(t), "n.sock")}
	} else {
		a = transport.Addr{Scheme: network, Host: "127.0.0.1"}
	}
	ln, err := transport.Listen(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	if a.OverTCP() {
		a.Port = uint16(ln.Addr().(*net.TCPAddr).Port)
	}
	return ln, a
}

// pair starts two nodes that trust each other. Over "tls" both refuse
// plaintext, so nothing can pass outside TLS.
func pair(t testing.TB, network string, opts Options) (a, b *node) {
	t.Helper()
	if network == "tls" {
		opts.RefusePlaintext = true
	}
	a = &node{name: "alice"}
	b = &node{name: "bob"}
	lnA, addrA := listenOn(t, network)
	lnB, addrB := listenOn(t, network)
	a.addr, b.addr = addrA, addrB
	for _, n := range []*node{a, b} {
		kp, err := identity.GenerateKeypair()
		if err != nil {
			t.Fatal(err)
		}
		n.kp = kp
	}
	trustOf := func(other *node) *trust.List {
		l, err := trust.New(trust.Peer{Name: other.name, ID: other.kp.ID(), Addr: other.addr})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	var err error
	if a.r, err = New(a.kp, trustOf(b), opts); err != nil {
		t.Fatal(err)
	}
	if b.r, err = New(b.kp, trustOf(a), opts); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		n  *node
		ln net.Listener
	}{{a, lnA}, {b, lnB}} {
		serveRouter(t, x.n.r, x.ln)
	}
	return a, b
}

// serveRouter serves ln with r until the test ends, then closes r and
// checks that Serve returned cleanly.
func serveRouter(t testing.TB, r *Router, ln net.Listener) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- r.Serve(ln) }()
	t.Cleanup(func() {
		r.Close()
		if err := <-errc; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMessageAndRequestResponse(t *testing.T) {
	for _, network := range []string{"uds", "tcp", "tls"} {
		t.Run(network, func(t *testing.T) {
			testutil.CheckGoroutines(t)
			a, b := pair(t, network, Options{})
			ctx := ctxT(t)
			id, err := a.r.SendMessage(ctx, "bob", "hello bob")
			if err != nil {
				t.Fatal(err)
			}
			items, err := b.r.Inbox().Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(items) != 1 || items[0].Envelope.ID != id || items[0].Envelope.Kind.Body() != "hello bob" || items[0].PeerName != "alice" {
				t.Fatalf("bob's inbox: %+v", items)
			}
			// A message's id is time-ordered (version 7), so that the
			// receiver's duplicate filter grows at its end.
			if v := id[6] >> 4; v != 7 {
				t.Errorf("message id %s: version %d, want 7", id, v)
			}

			reqID, err := a.r.SendRequest(ctx, b.kp.ID().String(), "add", mustJSON(t, `{"a":1,"b":2}`))
			if err != nil {
				t.Fatal(err)
			}
			items, err = b.r.Inbox().Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			req := items[0].Envelope
			if req.ID != reqID || req.Kind.Intent() != "add" {
				t.Fatalf("bob got %+v", req)
			}
			if _, err := b.r.SendResponse(ctx, "alice", req.ID, wire.StatusCompleted, wire.Int(3)); err != nil {
				t.Fatal(err)
			}
			resp, err := a.r.AwaitResponse(ctx, reqID)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := resp.Kind.InReplyTo(); got != reqID || resp.Kind.Status() != wire.StatusCompleted {
				t.Fatalf("response %+v", resp)
			}
			if n, _ := resp.Kind.Result().Int(); n != 3 {
				t.Fatalf("result %v", resp.Kind.Result())
			}
			// The response is in alice's inbox too, and was not acked.
			items, err = a.r.Inbox().Wait(ctx)
			if err != nil || len(items) != 1 || items[0].Envelope.Kind.Type() != wire.TypeResponse {
				t.Fatalf("alice's inbox: %+v, %v", items, err)
			}
			if s := a.r.Stats(); s.AcksSent != 0 {
				t.Fatalf("alice acked %d envelopes; responses are never acked", s.AcksSent)
			}
			if _, err := a.r.AwaitResponse(ctx, reqID); !errors.Is(err, ErrUnknownRequest) {
				t.Fatalf("awaiting an answered request: %v", err)
			}
		})
	}
}

func TestPipelinedSendsShareOneConnection(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	const n = 200
	sendAll(t, a.r, "bob", n, func(i int) string { return strings.Repeat("x", i) })
	if got := b.r.Inbox().Len(); got != n {
		t.Fatalf("bob has %d items, want %d", got, n)
	}
	if s := b.r.Stats(); s.AcksSent != n {
		t.Fatalf("bob sent %d acks", s.AcksSent)
	}
	if got := b.r.Stats().Connections; got != 1 {
		t.Fatalf("bob has %d inbound connections, want 1 shared", got)
	}
}

// sendAll sends n messages (body(i) the i-th) from r to peer, all at
// once, each on a goroutine of its own, and fails t on the first error.
func sendAll(t *testing.T, r *Router, peer string, n int, body func(i int) string) {
	t.Helper()
	ctx := ctxT(t)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := r.SendMessage(ctx, peer, body(i))
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestUnknownPeerAndOffline(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{AckTimeout: 2 * time.Second})
	ctx := ctxT(t)
	if _, err := a.r.SendMessage(ctx, "carol", "hi"); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("unknown peer: %v", err)
	}
	b.r.Close()
	_, err := a.r.SendMessage(ctx, "bob", "are you there")
	var poe *PeerOfflineError
	if !errors.As(err, &poe) || !errors.Is(err, ErrPeerOffline) || poe.Peer != "bob" {
		t.Fatalf("closed peer: %v", err)
	}
}

// A peer that answers like the Rust reference — one envelope per
// connection, ack, close — is served through one-shot connections.
func TestOneShotPeer(t *testing.T) {
	testutil.CheckGoroutines(t)
	ln, addr := listenOn(t, "uds")
	peerKP, _ := identity.GenerateKeypair()
	me, _ := identity.GenerateKeypair()
	l, err := trust.New(trust.Peer{Name: "rusty", ID: peerKP.ID(), Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(me, l, Options{AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer ln.Close()
	served := make(chan int, 1)
	go func() {
		n := 0
		defer func() { served <- n }()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			payload, err := transport.ReadFrame(c, 0)
			if err == nil {
				e, err := wire.Open(payload)
				if err == nil {
					ack, _ := wire.Seal(peerKP, identity.NewUUID(), e.From, wire.Ack(e.ID))
					b, _ := ack.MarshalBinary()
					transport.WriteFrame(c, b)
					n++
				}
			}
			c.Close() // one envelope per connection
		}
	}()
	ctx := ctxT(t)
	for i := range 5 {
		if _, err := r.SendMessage(ctx, "rusty", "msg"); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	ln.Close()
	if n := <-served; n != 5 {
		t.Fatalf("peer acked %d envelopes, want 5", n)
	}
}

func TestDuplicateDeliveredOnceAckedTwice(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{})
	e, err := wire.Seal(a.kp, identity.NewUUID(), b.kp.ID(), wire.Message("once"))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := e.MarshalBinary()
	for range 2 {
		c, err := transport.Dial(context.Background(), b.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := transport.WriteFrame(c, payload); err != nil {
			t.Fatal(err)
		}
		ackPayload, err := transport.ReadFrame(c, 0)
		if err != nil {
			t.Fatalf("no ack: %v", err)
		}
		ack, err := wire.Open(ackPayload)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := ack.Kind.InReplyTo(); got != e.ID || ack.From != b.kp.ID() || ack.To != a.kp.ID() {
			t.Fatalf("bad ack %+v", ack)
		}
		c.Close()
	}
	testutil.WaitFor(t, 5*time.Second, "duplicate counted", func() bool { return b.r.Stats().Duplicates == 1 })
	if n := b.r.Inbox().Len(); n != 1 {
		t.Fatalf("inbox has %d items, want 1", n)
	}
}

func mustJSON(t *testing.T, s string) wire.Value {
	t.Helper()
	v, err := wire.ParseJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSpawnSubagentResult(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, _ := pair(t, "uds", Options{})
	ctx := ctxT(t)
	id, err := a.r.Spawn(ctx, func(ctx context.Context) (wire.Value, string, error) {
		return wire.Int(7), "counted to seven", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	failID, err := a.r.Spawn(ctx, func(ctx context.Context) (wire.Value, string, error) {
		return wire.Value{}, "", errors.New("no luck")
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[identity.UUID]Item{}
	for len(got) < 2 {
		items, err := a.r.Inbox().Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if it.Type != ItemSubagentResult {
				t.Fatalf("unexpected item %+v", it)
			}
			got[it.SubagentID] = it
		}
	}
	if n, _ := got[id].Result.Int(); n != 7 || got[id].Summary != "counted to seven" {
		t.Fatalf("result %+v", got[id])
	}
	if msg, _ := got[failID].Result.Get("error"); !msg.Equal(wire.Text("no luck")) || !strings.HasPrefix(got[failID].Summary, "failed") {
		t.Fatalf("failure result %+v", got[failID])
	}
	a.r.Close()
	if _, err := a.r.Spawn(ctx, func(context.Context) (wire.Value, string, error) { return wire.Null(), "", nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Spawn after Close: %v", err)
	}
}

// Strangers holding every connection slot open cannot lock a trusted peer
// out: its new connection evicts the oldest connection that has not yet
// delivered a valid envelope.
func TestStrangersCannotHoldAllSlots(t *testing.T) {
	testutil.CheckGoroutines(t)
	const maxConns = 8
	a, b := pair(t, "uds", Options{MaxConnections: maxConns})
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range maxConns {
		c, err := transport.Dial(context.Background(), b.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	testutil.WaitFor(t, 10*time.Second, "bob to hold the strangers", func() bool { return b.r.Stats().Connections == maxConns })
	if _, err := a.r.SendMessage(ctxT(t), "bob", "let me in"); err != nil {
		t.Fatalf("trusted peer locked out by strangers: %v", err)
	}
	if got := b.r.Stats().Rejected[RejectOverload]; got == 0 {
		t.Fatal("no overload counted")
	}
	if n := b.r.Stats().Connections; n > maxConns {
		t.Fatalf("bob holds %d connections, limit %d", n, maxConns)
	}
}

// A receiver closing an idle connection is not a one-envelope-per-
// connection peer: the sender keeps using persistent, pipelined links.
func TestIdleCloseKeepsPersistentLinks(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b := pair(t, "uds", Options{IdleTimeout: 1500 * time.Millisecond}) // far past oneShotCloseWindow, even on a loaded machine
	ctx := ctxT(t)
	if _, err := a.r.SendMessage(ctx, "bob", "one"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "bob to close the idle connection", func() bool { return b.r.Stats().Connections == 0 })
	if _, err := a.r.SendMessage(ctx, "bob", "two"); err != nil {
		t.Fatal(err)
	}
	if _, oneShot := outConnOf(a.r, b.kp.ID()); oneShot {
		t.Fatal("an idle close switched the link to one connection per envelope")
	}
}

// asyncInbox is an AsyncAdmitter whose admissions of a body "fail" fail.
type asyncInbox struct {
	mu     sync.Mutex
	stored []string
}

func (a *asyncInbox) Push(it Item) error { return a.PushAsync(it).Wait() }

func (a *asyncInbox) PushAsync(it Item) Admission {
	return asyncAdmission{a: a, body: it.Envelope.Kind.Body()}
}

// asyncAdmission decides when it is waited for; it is never Ready, so the
// connection writes the acks it holds before each Wait.
type asyncAdmission struct {
	a    *asyncInbox
	body string
}

func (p asyncAdmission) Ready() bool { return false }

func (p asyncAdmission) Wait() error {
	if p.body == "fail" {
		return inbox.ErrFull
	}
	p.a.mu.Lock()
	p.a.stored = append(p.a.stored, p.body)
	p.a.mu.Unlock()
	return nil
}

// With an AsyncAdmitter a connection admits pipelined envelopes together
// and acks each one that was stored; a failed admission gets no ack and
// closes the connection after the others' acks are written. The reader
// does not wait for admissions, so the envelope after the failed one may
// or may not have been read (and admitted) by then: whatever was stored is
// acked, nothing else is.
func TestAsyncAdmission(t *testing.T) {
	testutil.CheckGoroutines(t)
	ai := &asyncInbox{}
	a, b := pair(t, "uds", Options{Inbox: ai})
	var burst []byte
	var ids []identity.UUID
	for _, body := range []string{"one", "fail", "three"} {
		e, err := wire.Seal(a.kp, identity.NewUUID(), b.kp.ID(), wire.Message(body))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
		p, _ := e.MarshalBinary()
		burst, _ = transport.AppendFrame(burst, p)
	}
	c, err := transport.Dial(context.Background(), b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(burst); err != nil {
		t.Fatal(err)
	}
	acked := map[identity.UUID]bool{}
	fr := transport.NewReader(c, 0)
	for {
		p, err := fr.ReadFrame()
		if err != nil {
			break // closed after the acks
		}
		ack, err := wire.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := ack.Kind.InReplyTo()
		acked[id] = true
	}
	ai.mu.Lock()
	got := strings.Join(ai.stored, ",")
	ai.mu.Unlock()
	if got != "one" && got != "one,three" {
		t.Fatalf("stored %q; want one, perhaps three, never the failed second", got)
	}
	if !acked[ids[0]] || acked[ids[1]] || acked[ids[2]] != (got == "one,three") {
		t.Fatalf("acked %v, stored %q; want exactly the stored ones acked", acked, got)
	}
	if n := b.r.Stats().Rejected[RejectInboxFull]; n != 1 {
		t.Fatalf("inbox_full refusals %d", n)
	}
}

// gatedInbox is an AsyncAdmitter whose admissions all complete when gate
// is closed.
type gatedInbox struct {
	gate    chan struct{}
	mu      sync.Mutex
	started int
}

func (g *gatedInbox) Push(it Item) error { return g.PushAsync(it).Wait() }

func (g *gatedInbox) PushAsync(Item) Admission {
	g.mu.Lock()
	g.started++
	g.mu.Unlock()
	return gatedAdmission{g.gate}
}

type gatedAdmission struct{ gate chan struct{} }

func (p gatedAdmission) Ready() bool {
	select {
	case <-p.gate:
		return true
	default:
		return false
	}
}

func (p gatedAdmission) Wait() error { <-p.gate; return nil }

// A connection keeps reading and admitting pipelined envelopes while an
// earlier admission is still committing, and acks all of them once they
// are stored.
func TestAsyncAdmissionReadsAhead(t *testing.T) {
	testutil.CheckGoroutines(t)
	g := &gatedInbox{gate: make(chan struct{})}
	a, b := pair(t, "uds", Options{Inbox: g})
	c, err := transport.Dial(context.Background(), b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	ids := map[identity.UUID]bool{}
	for i := range 3 {
		e, err := wire.Seal(a.kp, identity.NewUUID(), b.kp.ID(), wire.Message(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids[e.ID] = true
		p, _ := e.MarshalBinary()
		frame, _ := transport.AppendFrame(nil, p)
		if _, err := c.Write(frame); err != nil { // one at a time: separate reads
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, "the admission to start", func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.started == i+1 // the reader did not wait for the earlier ones
		})
	}
	close(g.gate)
	fr := transport.NewReader(c, 0)
	for len(ids) > 0 {
		p, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("%d acks missing: %v", len(ids), err)
		}
		ack, err := wire.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := ack.Kind.InReplyTo()
		if !ids[id] {
			t.Fatalf("unexpected ack for %s", id)
		}
		delete(ids, id)
	}
}

// reserved is d.reserve(k) for no connection.
func reserved(d *dedup, k dedupKey) int {
	out, _ := d.reserve(k, 0)
	return out
}

// A copy pending on one connection is that connection's: same only for
// the connection that reserved it, never for none (0).
func TestDedupOwner(t *testing.T) {
	var d dedup
	d.init(4)
	var k dedupKey
	k.id[0] = 1
	if out, _ := d.reserve(k, 7); out != dedupNew {
		t.Fatal("not new")
	}
	for _, c := range []struct {
		owner uint64
		same  bool
	}{{7, true}, {8, false}, {0, false}} {
		if out, same := d.reserve(k, c.owner); out != dedupPending || same != c.same {
			t.Errorf("reserve by %d: %d, same %v; want pending, same %v", c.owner, out, same, c.same)
		}
	}
	d.commit(k)
	if out, same := d.reserve(k, 7); out != dedupCommitted || same {
		t.Errorf("after commit: %d, %v", out, same)
	}
}

// A sender that writes the same envelope again behind itself, in one
// burst, while the first copy is still being stored: the copies are not
// acked themselves (the first's ack names the same id), the connection
// stays open, and the envelope behind them is admitted and acked.
func TestDuplicateInBurstWhileAdmitting(t *testing.T) {
	testutil.CheckGoroutines(t)
	g := &gatedInbox{gate: make(chan struct{})}
	a, b := pair(t, "uds", Options{Inbox: g})
	var opened sync.Once
	open := func() { opened.Do(func() { close(g.gate) }) }
	t.Cleanup(open) // before the routers close, which wait for admissions
	x := sealEnv(t, a.kp, b.kp.ID(), wire.Message("x"))
	y := sealEnv(t, a.kp, b.kp.ID(), wire.Message("y"))
	var burst []byte
	for _, e := range []wire.Envelope{x, x, x, y} {
		burst = append(burst, frameOf(t, e)...)
	}
	c := dialRaw(t, b)
	writeRaw(t, c, burst)
	testutil.WaitFor(t, 10*time.Second, "both admissions to start", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.started == 2
	})
	open()
	readAck(t, c, b.kp.ID(), a.kp.ID(), x.ID)
	readAck(t, c, b.kp.ID(), a.kp.ID(), y.ID)
	if st := b.r.Stats(); st.Rejected[RejectInFlight] != 0 || st.Duplicates != 2 || st.Accepted != 2 {
		t.Errorf("in_flight refusals %d, duplicates %d, accepted %d; want 0, 2, 2", st.Rejected[RejectInFlight], st.Duplicates, st.Accepted)
	}
	// Still open: another envelope is acked on it.
	z := sealEnv(t, a.kp, b.kp.ID(), wire.Message("z"))
	writeRaw(t, c, frameOf(t, z))
	readAck(t, c, b.kp.ID(), a.kp.ID(), z.ID)
}

// The duplicate filter holds the last n keys, growing to n as keys
// arrive, then forgetting the oldest first.
func TestDedupWindow(t *testing.T) {
	var d dedup
	d.init(3)
	key := func(i byte) dedupKey { var k dedupKey; k.id[0] = i; return k }
	for i := range byte(3) {
		if reserved(&d, key(i)) != dedupNew {
			t.Fatalf("key %d not new", i)
		}
		d.commit(key(i))
	}
	if len(d.ring) != 3 || reserved(&d, key(0)) != dedupCommitted {
		t.Fatalf("ring %d, key 0 not remembered", len(d.ring))
	}
	if reserved(&d, key(3)) != dedupNew { // evicts key 0
		t.Fatal("key 3 not new")
	}
	if reserved(&d, key(0)) != dedupNew {
		t.Fatal("key 0 still remembered past the window")
	}
	if reserved(&d, key(2)) == dedupNew || len(d.ring) != 3 || len(d.seen) != 3 {
		t.Fatalf("window broken: ring %d, seen %d", len(d.ring), len(d.seen))
	}
}

// TestBadAckFromPeer: on our outbound connection, an ack is routed to its
// sender before its signature is checked (the sender checks it). Whatever
// the peer answers, a send succeeds only on a genuine ack of its envelope.
func TestBadAckFromPeer(t *testing.T) {
	testutil.CheckGoroutines(t)
	other, _ := identity.GenerateKeypair()
	// ack is peer's ack of id to e's sender, signed by signer (as if by
	// peer), its signature corrupted if corrupt.
	ack := func(peer, signer *identity.Keypair, e wire.Envelope, id identity.UUID, corrupt bool) []byte {
		_, f := sealedFrame(t, signer, e.From, wire.Ack(id), func(a *wire.Envelope) {
			a.From = peer.ID()
			if corrupt {
				a.Sig[7] ^= 1
			}
		})
		return f
	}
	// acks is peer's acks kind naming ids, as ack.
	acks := func(peer, signer *identity.Keypair, e wire.Envelope, ids []identity.UUID, corrupt bool) []byte {
		_, f := sealedFrame(t, signer, e.From, wire.Acks(ids), func(a *wire.Envelope) {
			a.From = peer.ID()
			if corrupt {
				a.Sig[9] ^= 1
			}
		})
		return f
	}
	for _, tc := range []struct {
		name   string
		answer func(peer *identity.Keypair, e wire.Envelope) []byte
		ok     bool
	}{
		{"genuine", func(p *identity.Keypair, e wire.Envelope) []byte { return ack(p, p, e, e.ID, false) }, true},
		{"corrupted signature", func(p *identity.Keypair, e wire.Envelope) []byte { return ack(p, p, e, e.ID, true) }, false},
		{"signed by another key", func(p *identity.Keypair, e wire.Envelope) []byte { return ack(p, other, e, e.ID, false) }, false},
		{"garbage", func(*identity.Keypair, wire.Envelope) []byte { return []byte{0, 0, 0, 3, 0xff, 0xff, 0xff} }, false},
		{"another id first", func(p *identity.Keypair, e wire.Envelope) []byte {
			return append(ack(p, p, e, identity.NewUUID(), false), ack(p, p, e, e.ID, false)...)
		}, true},
		{"forged, then genuine", func(p *identity.Keypair, e wire.Envelope) []byte {
			return append(ack(p, p, e, e.ID, true), ack(p, p, e, e.ID, false)...)
		}, false},
		// An acks kind is checked as an ack is; ids nobody waits for are
		// ignored.
		{"acks naming it among others", func(p *identity.Keypair, e wire.Envelope) []byte {
			return acks(p, p, e, []identity.UUID{identity.NewUUID(), e.ID, identity.NewUUID()}, false)
		}, true},
		{"acks with a corrupted signature", func(p *identity.Keypair, e wire.Envelope) []byte {
			return acks(p, p, e, []identity.UUID{e.ID}, true)
		}, false},
		{"acks signed by another key", func(p *identity.Keypair, e wire.Envelope) []byte {
			return acks(p, other, e, []identity.UUID{e.ID}, false)
		}, false},
		{"acks of other ids, then a genuine ack", func(p *identity.Keypair, e wire.Envelope) []byte {
			return append(acks(p, p, e, []identity.UUID{identity.NewUUID()}, false), ack(p, p, e, e.ID, false)...)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peerKP, r, conns := rawPeer(t, 5*time.Second)
			done := sendAsync(ctxT(t), r, "hello")
			c := <-conns
			peerWrite(t, c, tc.answer(peerKP, readEnvelope(t, c)))
			err := <-done
			if tc.ok {
				if err != nil {
					t.Fatalf("send: %v", err)
				}
				return
			}
			var poe *PeerOfflineError
			if !errors.As(err, &poe) || poe.Reason != OfflineBadAck {
				t.Fatalf("send: %v, want a PeerOfflineError for an invalid ack", err)
			}
		})
	}
}

// rawPeer is a fake peer on one listener: it accepts connections and
// hands each to the test.
// sendAsync sends body to "peer" from r on a goroutine of its own; the
// channel gets the outcome.
func sendAsync(ctx context.Context, r *Router, body string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := r.SendMessage(ctx, "peer", body)
		done <- err
	}()
	return done
}

// noNewConn fails if rawPeer accepted another connection.
func noNewConn(t *testing.T, conns <-chan net.Conn) {
	t.Helper()
	select {
	case c := <-conns:
		t.Fatalf("a new connection %v was dialed", c.LocalAddr())
	default:
	}
}

func rawPeer(t *testing.T, ackTimeout time.Duration) (peerKP *identity.Keypair, r *Router, conns <-chan net.Conn) {
	t.Helper()
	return rawPeerWith(t, Options{AckTimeout: ackTimeout})
}

// rawPeerWith is rawPeer with the Router's options.
func rawPeerWith(t *testing.T, opts Options) (peerKP *identity.Keypair, r *Router, conns <-chan net.Conn) {
	t.Helper()
	peerKP, _ = identity.GenerateKeypair()
	me, _ := identity.GenerateKeypair()
	ln, addr := listenOn(t, "uds")
	l, err := trust.New(trust.Peer{Name: "peer", ID: peerKP.ID(), Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	r, err = New(me, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan net.Conn, 4)
	stop := make(chan struct{})
	var mu sync.Mutex
	var accepted []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(20 * time.Second))
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
			select {
			case ch <- c:
			case <-stop: // the test is over: nobody takes more
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		r.Close()
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range accepted {
			c.Close()
		}
	})
	return peerKP, r, ch
}

// readEnvelope reads and opens one envelope from the fake peer's side.
func readEnvelope(t *testing.T, c net.Conn) wire.Envelope {
	t.Helper()
	payload, err := transport.ReadFrame(c, 0)
	if err != nil {
		t.Fatalf("peer: read: %v", err)
	}
	e, err := wire.Open(payload)
	if err != nil {
		t.Fatalf("peer: open: %v", err)
	}
	return e
}

// sealedFrame seals kind from kp to `to`, lets mutate (if not nil) change
// the sealed envelope, and returns its id and frame.
func sealedFrame(t *testing.T, kp *identity.Keypair, to identity.PeerID, kind wire.Kind, mutate func(*wire.Envelope)) (identity.UUID, []byte) {
	t.Helper()
	e, err := wire.Seal(kp, identity.NewUUID(), to, kind)
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(&e)
	}
	b, err := e.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	f, err := transport.AppendFrame(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	return e.ID, f
}

// writeEnvelope writes a sealed envelope from the fake peer's side.
func writeEnvelope(t *testing.T, c net.Conn, kp *identity.Keypair, to identity.PeerID, kind wire.Kind) identity.UUID {
	t.Helper()
	id, f := sealedFrame(t, kp, to, kind, nil)
	peerWrite(t, c, f)
	return id
}

// peerWrite writes bytes from the fake peer's side.
func peerWrite(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatalf("peer: write: %v", err)
	}
}

// ackFrameOf is kp's ack of e, as a frame.
func ackFrameOf(t *testing.T, kp *identity.Keypair, e wire.Envelope) []byte {
	t.Helper()
	_, f := sealedFrame(t, kp, e.From, wire.Ack(e.ID), nil)
	return f
}

// outConnOf returns the live outbound connection of r's link to id (nil
// if none), and whether the link sends one envelope per connection.
func outConnOf(r *Router, id identity.PeerID) (oc *outConn, oneShot bool) {
	r.mu.Lock()
	lk := r.links[id]
	r.mu.Unlock()
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.conn, lk.oneShot
}

// TestOutboundReaders: a send waiting for its ack reads the connection
// itself when nobody else does, and readLoop takes over once the link is
// idle. A send cancelled while it reads leaves the connection intact; an
// idle connection still sees what the peer sends and when it closes.
func TestOutboundReaders(t *testing.T) {
	testutil.CheckGoroutines(t)
	t.Run("cancel while reading", func(t *testing.T) {
		peerKP, r, conns := rawPeer(t, 10*time.Second)
		ctx, cancel := context.WithCancel(ctxT(t))
		errc := sendAsync(ctx, r, "first")
		c := <-conns
		first := readEnvelope(t, c) // not answered yet
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled send: %v, want context.Canceled", err)
		}
		writeEnvelope(t, c, peerKP, first.From, wire.Ack(first.ID)) // late: nobody waits for it
		done := sendAsync(ctxT(t), r, "second")
		second := readEnvelope(t, c) // on the same connection: the stream was left in step
		writeEnvelope(t, c, peerKP, second.From, wire.Ack(second.ID))
		if err := <-done; err != nil {
			t.Fatalf("second send: %v", err)
		}
		noNewConn(t, conns)
	})
	t.Run("ack timeout while reading", func(t *testing.T) {
		peerKP, r, conns := rawPeer(t, time.Second)
		errc := sendAsync(ctxT(t), r, "never acked")
		c := <-conns
		readEnvelope(t, c)
		var poe *PeerOfflineError
		if err := <-errc; !errors.As(err, &poe) || poe.Reason != OfflineTimeout {
			t.Fatalf("unacked send: %v, want a timeout", err)
		}
		errc = sendAsync(ctxT(t), r, "acked")
		e := readEnvelope(t, c) // the same connection: the timeout left it in step
		writeEnvelope(t, c, peerKP, e.From, wire.Ack(e.ID))
		if err := <-errc; err != nil {
			t.Fatalf("next send: %v", err)
		}
	})
	t.Run("idle connection reads what the peer sends", func(t *testing.T) {
		peerKP, r, conns := rawPeer(t, 10*time.Second)
		done := sendAsync(ctxT(t), r, "hello")
		c := <-conns
		e := readEnvelope(t, c)
		writeEnvelope(t, c, peerKP, e.From, wire.Ack(e.ID))
		if err := <-done; err != nil {
			t.Fatalf("send: %v", err)
		}
		// Nobody sends now: readLoop must still take the peer's envelope
		// on this connection and answer it there.
		id := writeEnvelope(t, c, peerKP, e.From, wire.Message("on your connection"))
		ack := readEnvelope(t, c)
		if got, _ := ack.Kind.InReplyTo(); ack.Kind.Type() != wire.TypeAck || got != id {
			t.Fatalf("answer %v, want the ack of %s", ack.Kind.Type(), id)
		}
		if n := r.Inbox().Len(); n != 1 {
			t.Fatalf("inbox holds %d items, want the peer's message", n)
		}
		// The peer closing the idle connection is seen without a send.
		c.Close()
		testutil.WaitFor(t, 10*time.Second, "the link to notice the close", func() bool {
			oc, _ := outConnOf(r, peerKP.ID()) // (closed this soon after an exchange, it may look one-shot)
			return oc == nil
		})
	})
}

// TestReadingSendCancelledMidFrame: a send cancelled while it reads, with
// half of another send's ack already read ahead, leaves the connection in
// step: that ack completes the other send on the same connection, and the
// link is not taken for a one-envelope-per-connection peer.
func TestReadingSendCancelledMidFrame(t *testing.T) {
	testutil.CheckGoroutines(t)
	peerKP, r, conns := rawPeer(t, 10*time.Second)
	first := sendAsync(ctxT(t), r, "s0")
	c := <-conns
	peerWrite(t, c, ackFrameOf(t, peerKP, readEnvelope(t, c)))
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancel(ctxT(t))
	doneA := sendAsync(ctxA, r, "A")
	readEnvelope(t, c)
	testutil.WaitFor(t, 10*time.Second, "A to read the connection", func() bool {
		oc, _ := outConnOf(r, peerKP.ID())
		oc.dlmu.Lock()
		defer oc.dlmu.Unlock()
		return oc.readerCh != nil
	})
	doneB := sendAsync(ctxT(t), r, "B")
	ack := ackFrameOf(t, peerKP, readEnvelope(t, c))
	peerWrite(t, c, ack[:10]) // half of B's ack
	cancelA()
	if err := <-doneA; !errors.Is(err, context.Canceled) {
		t.Fatalf("A: %v, want context.Canceled", err)
	}
	peerWrite(t, c, ack[10:])
	if err := <-doneB; err != nil {
		t.Fatalf("B: %v", err)
	}
	noNewConn(t, conns)
	if _, oneShot := outConnOf(r, peerKP.ID()); oneShot {
		t.Error("cancelling A made the link one-envelope-per-connection")
	}
}

// TestAckOnInboundWakesReadingSend: the ack of a send that is reading its
// outbound connection may come on an inbound connection instead; it ends
// the send at once, not at its deadline.
func TestAckOnInboundWakesReadingSend(t *testing.T) {
	testutil.CheckGoroutines(t)
	peerKP, r, conns := rawPeer(t, 10*time.Second)
	ln, addr := listenOn(t, "uds")
	served := make(chan error, 1)
	go func() { served <- r.Serve(ln) }()
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	done := sendAsync(ctx, r, "A")
	c := <-conns
	e := readEnvelope(t, c)
	ic, err := transport.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	peerWrite(t, ic, ackFrameOf(t, peerKP, e))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("send: %v", err)
		}
	case <-time.After(10 * time.Second): // half the send's deadline: it was not woken
		t.Fatal("the ack on the inbound connection did not end the send")
	}
}

// TestFirstAckGateReopens: a new connection carries one envelope until
// its first ack; if that send gives up first, the next waiting send goes.
func TestFirstAckGateReopens(t *testing.T) {
	testutil.CheckGoroutines(t)
	_, r, conns := rawPeer(t, 10*time.Second)
	ctxA, cancelA := context.WithCancel(ctxT(t))
	doneA := sendAsync(ctxA, r, "A")
	c := <-conns
	readEnvelope(t, c)
	ctxB, cancelB := context.WithCancel(ctxT(t))
	defer cancelB()
	doneB := sendAsync(ctxB, r, "B")
	cancelA()
	<-doneA
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := transport.ReadFrame(c, 0); err != nil {
		t.Fatalf("B was not written after A gave up: %v", err)
	}
	cancelB()
	<-doneB
}

// failingConn fails its first write (part of it may have gone out) and
// counts writes.
type failingConn struct {
	net.Conn
	writes int
}

func (f *failingConn) Write(b []byte) (int, error) {
	f.writes++
	if f.writes == 1 {
		return len(b) / 2, errors.New("test: reset")
	}
	return len(b), nil
}

func (f *failingConn) SetWriteDeadline(time.Time) error { return nil }

// TestAckWriterStopsAfterFailure: once an ack write failed (the stream
// may end in half a frame), neither the reader nor ackLoop writes again.
func TestAckWriterStopsAfterFailure(t *testing.T) {
	fc := &failingConn{}
	aw := &ackWriter{c: fc}
	for i, want := range []bool{false, false, false} {
		aw.mu.Lock()
		err := aw.writeLocked([]byte("ack frame"), time.Second)
		aw.mu.Unlock()
		if (err == nil) != want {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if fc.writes != 1 {
		t.Fatalf("%d writes reached the connection, want only the failed one", fc.writes)
	}
}

// PeerConnected is told once per inbound connection a trusted peer
// authenticates (at the TLS handshake, or at its first envelope), and
// Stats counts that connection as authenticated.
func TestPeerConnected(t *testing.T) {
	for _, network := range []string{"uds", "tcp", "tls"} {
		t.Run(network, func(t *testing.T) {
			testutil.CheckGoroutines(t)
			var mu sync.Mutex
			var told []identity.PeerID
			a, b := pair(t, network, Options{PeerConnected: func(id identity.PeerID) {
				mu.Lock()
				told = append(told, id)
				mu.Unlock()
			}})
			ctx := ctxT(t)
			for range 3 {
				if _, err := a.r.SendMessage(ctx, "bob", "hi"); err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			got := slices.Clone(told)
			mu.Unlock()
			if len(got) != 1 || got[0] != a.kp.ID() {
				t.Fatalf("told %v, want alice once", got)
			}
			if s := b.r.Stats(); s.Connections != 1 || s.Authenticated != 1 {
				t.Fatalf("bob's stats: %+v", s)
			}
		})
	}
}

// A dialled peer that begins a frame and never finishes it loses the
// connection once the frame timeout has passed, whether the frame came
// while the connection was idle (its own reader waiting for frames) or
// while a send waited for its ack: the link dials again and the next
// send is acknowledged on the new connection. (Before, the idle reader
// waited without a deadline and held the read token for ever: every later
// send timed out and the link never dialled again.)
func TestStalledFrameFromDialledPeer(t *testing.T) {
	testutil.CheckGoroutines(t)
	stall := []byte{0, 0, 0, 100, 0xa5} // a header declaring 100 bytes, then one
	for _, idle := range []bool{true, false} {
		name := map[bool]string{true: "while idle", false: "while a send waits"}[idle]
		t.Run(name, func(t *testing.T) {
			peerKP, r, conns := rawPeerWith(t, Options{AckTimeout: time.Second, FrameTimeout: 200 * time.Millisecond})
			ctx := ctxT(t)
			done := sendAsync(ctx, r, "first")
			c := <-conns
			e := readEnvelope(t, c)
			if idle {
				peerWrite(t, c, ackFrameOf(t, peerKP, e))
				if err := <-done; err != nil {
					t.Fatalf("first send: %v", err)
				}
				time.Sleep(5 * idleRead) // the connection's own reader now waits for frames
				peerWrite(t, c, stall)
			} else {
				peerWrite(t, c, stall)
				if err := <-done; err == nil {
					t.Fatal("first send: acknowledged, though the peer sent only part of a frame")
				}
			}
			sendAcked(t, peerKP, r, conns, nil, "the send after the stall") // on a new connection
		})
	}
}

// Sends that keep the connection's reader busy, one after another, also
// end a connection whose peer left a frame unfinished: the first send to
// wait out its deadline with no frame from the peer fails it. (Without
// that, the connection's own reader never gets to read while sends keep
// starting, and every send times out until they stop.)
func TestStalledFrameUnderSteadySends(t *testing.T) {
	testutil.CheckGoroutines(t)
	peerKP, r, conns := rawPeerWith(t, Options{AckTimeout: time.Second, FrameTimeout: 100 * time.Millisecond})
	ctx := ctxT(t)
	c := sendAcked(t, peerKP, r, conns, nil, "first")
	// From now on the peer reads what comes and answers nothing but the
	// start of a frame.
	go io.Copy(io.Discard, c)
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	stall := time.After(50 * time.Millisecond) // sends in flight by then
	deadline := time.After(3 * time.Second)
	for redialled := false; !redialled; {
		select {
		case <-tick.C:
			wg.Go(func() { r.SendMessage(ctx, "peer", "more") })
		case <-stall:
			peerWrite(t, c, []byte{0, 0, 0, 100, 0xa5})
		case <-conns:
			redialled = true
		case <-deadline:
			t.Fatal("sends kept starting and no new connection was dialled")
		}
	}
	r.Close() // the sends still waiting fail; their goroutines end
}

// A peer that stops answering on a connection that stays open (gone
// without a word, or a TLS record left unfinished, which no frame reader
// sees) loses the connection once a send has waited its whole deadline,
// at least the frame timeout, without a frame: the next send dials again.
func TestSilentConnectionIsDroppedAfterATimedOutSend(t *testing.T) {
	testutil.CheckGoroutines(t)
	peerKP, r, conns := rawPeerWith(t, Options{AckTimeout: time.Second, FrameTimeout: 100 * time.Millisecond})
	c := sendAcked(t, peerKP, r, conns, nil, "first")
	done := sendAsync(ctxT(t), r, "unanswered")
	readEnvelope(t, c) // and never answered
	if err := <-done; err == nil {
		t.Fatal("a send nobody acknowledged succeeded")
	}
	sendAcked(t, peerKP, r, conns, nil, "the send after the silence") // on a new connection
}

// sendAcked sends body from r and has the fake peer acknowledge it on c
// (the next connection from conns when c is nil); it returns c.
func sendAcked(t *testing.T, peerKP *identity.Keypair, r *Router, conns <-chan net.Conn, c net.Conn, body string) net.Conn {
	t.Helper()
	done := sendAsync(ctxT(t), r, body)
	if c == nil {
		select {
		case c = <-conns:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no new connection", body)
		}
	}
	peerWrite(t, c, ackFrameOf(t, peerKP, readEnvelope(t, c)))
	if err := <-done; err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return c
}
