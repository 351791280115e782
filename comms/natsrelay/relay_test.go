package natsrelay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/natstest"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// drainInbox collects what n has received until want items are there.
func waitItems(t *testing.T, n *testNode, want int) []comms.Item {
	t.Helper()
	var got []comms.Item
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(got) < want {
		items, err := n.r.Inbox().Wait(ctx)
		if err != nil {
			t.Fatalf("waiting for %d items, have %d: %v", want, len(got), err)
		}
		got = append(got, items...)
	}
	return got
}

func TestMessageRequestResponseThroughNATS(t *testing.T) {
	testutil.CheckGoroutines(t)
	_, a, b := twoOnOneServer(t)
	ctx := ctxT(t)

	id, err := a.r.SendMessage(ctx, "n1", "hello through the broker")
	if err != nil {
		t.Fatal(err)
	}
	items := waitItems(t, b, 1)
	if items[0].Envelope.ID != id || items[0].Envelope.Kind.Body() != "hello through the broker" || items[0].PeerName != "n0" {
		t.Fatalf("b's inbox: %+v", items)
	}
	reqID, err := a.r.SendRequest(ctx, "n1", "add", wire.Int(2))
	if err != nil {
		t.Fatal(err)
	}
	req := waitItems(t, b, 1)[0].Envelope
	if req.ID != reqID || req.Kind.Intent() != "add" {
		t.Fatalf("b got %+v", req)
	}
	if _, err := b.r.SendResponse(ctx, "n0", req.ID, wire.StatusCompleted, wire.Int(3)); err != nil {
		t.Fatal(err)
	}
	resp, err := a.r.AwaitResponse(ctx, reqID)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := resp.Kind.InReplyTo(); got != reqID || resp.Kind.Status() != wire.StatusCompleted {
		t.Fatalf("response %+v", resp)
	}
	if st := b.relay.Status(); st.State != "connected" || st.Received < 2 || st.Subject != Subject("meerkat", b.kp.ID()) {
		t.Fatalf("b's status %+v", st)
	}
}

func TestSubjectIsThePeerUUID(t *testing.T) {
	kp, err := identity.KeypairFromSeed(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	got := Subject("fleet.a", kp.ID())
	want := "fleet.a.node." + kp.ID().UUID().String()
	if got != want {
		t.Fatalf("Subject = %q, want %q", got, want)
	}
	for _, c := range kp.ID().UUID().String() {
		if c == '.' || c == '*' || c == '>' || c == ' ' {
			t.Fatalf("peer UUID %q is not one subject token", kp.ID().UUID())
		}
	}
}

func TestOfflinePeerFailsFast(t *testing.T) {
	testutil.CheckGoroutines(t)
	s := startServer(t, "s1", "", nil, "")
	nodes := newNodes(t, 2)
	nodes[0].connect(t, s.ClientURL(), Options{})
	start := time.Now()
	_, err := nodes[0].r.SendMessage(ctxT(t), "n1", "anyone?")
	var off *comms.PeerOfflineError
	if !errors.As(err, &off) || off.Reason != comms.OfflineRelay || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("send to a peer not subscribed: %v", err)
	}
	t.Logf("no responders after %v", time.Since(start))
}

// A send while the connection to the server is down fails at once and
// is kept nowhere: the client does not publish it after reconnecting, so
// a send reported failed is not delivered later all the same (a reliable
// one is retried by its outbox).
func TestSendWhileDisconnectedIsNotKept(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, a, _ := twoOnOneServer(t)
	s.Shutdown()
	testutil.WaitFor(t, 30*time.Second, "the client to see the server gone", func() bool {
		return a.relay.Status().State == "reconnecting"
	})
	_, err := a.r.SendMessage(ctxT(t), "n1", "while the server is down")
	var off *comms.PeerOfflineError
	if !errors.As(err, &off) || off.Reason != comms.OfflineRelay || !errors.Is(err, ErrNotConnected) {
		t.Fatalf("send while disconnected: %v; want it refused at once, kept for no reconnect", err)
	}
}

func TestNoRelayConfigured(t *testing.T) {
	nodes := newNodes(t, 2)
	_, err := nodes[0].r.SendMessage(ctxT(t), "n1", "x")
	var off *comms.PeerOfflineError
	if !errors.As(err, &off) || off.Reason != comms.OfflineNoRelay {
		t.Fatalf("send without a relay: %v", err)
	}
}

// The broker, and anyone who can read the subjects, sees no body.
func TestBrokerSeesNoPlaintext(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, a, b := twoOnOneServer(t)
	spy := rawConn(t, s.ClientURL())
	var mu sync.Mutex
	var seen [][]byte
	sub, err := spy.Subscribe("meerkat.>", func(m *nats.Msg) {
		mu.Lock()
		seen = append(seen, bytes.Clone(m.Data))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	spy.Flush()
	const secret = "the launch code is swordfish"
	if _, err := a.r.SendMessage(ctxT(t), "n1", secret); err != nil {
		t.Fatal(err)
	}
	if got := waitItems(t, b, 1)[0].Envelope.Kind.Body(); got != secret {
		t.Fatalf("b read %q", got)
	}
	testutil.WaitFor(t, 10*time.Second, "the spy to see the envelope", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= 1
	})
	mu.Lock()
	defer mu.Unlock()
	for _, m := range seen {
		if bytes.Contains(m, []byte("swordfish")) {
			t.Fatalf("a message on the node subjects holds the body in the clear")
		}
		e, err := wire.Decode(m)
		if err != nil || e.Kind.Type() != wire.TypeSealed {
			t.Fatalf("a message on the node subjects is %v (%v), not a sealed envelope", e.Kind.Type(), err)
		}
	}
}

// Envelopes published straight onto a node's subject meet the same checks
// as on a socket: a stranger's and a forged one are refused, no ack goes
// back, nothing is admitted.
func TestForgedEnvelopesRefused(t *testing.T) {
	testutil.CheckGoroutines(t)
	s := startServer(t, "s1", "", nil, "")
	nodes := newNodes(t, 2)
	a, b := nodes[0], nodes[1]
	b.connect(t, s.ClientURL(), Options{})
	stranger, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	// Its requests name a reply inbox as a node's do: refusals are
	// answered only there.
	attacker := rawConn(t, s.ClientURL(), nats.CustomInboxPrefix(inboxPrefix+stranger.ID().UUID().String()))
	subj := Subject("meerkat", b.kp.ID())
	sealedBy := func(kp *identity.Keypair, kind wire.Kind) []byte {
		e, err := wire.Seal(kp, identity.NewUUID(), b.kp.ID(), kind)
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	badSig := sealedBy(a.kp, wire.Message("forged"))
	badSig[len(badSig)-1] ^= 1 // the signature is the last field
	cases := []struct {
		name, reason string
		payload      []byte
	}{
		{"untrusted key", comms.RejectUntrusted, sealedBy(stranger, wire.Message("hi"))},
		{"bad signature", comms.RejectBadSignature, badSig},
		{"not CBOR", comms.RejectMalformed, []byte("hello")},
		{"sealed by a stranger", comms.RejectUntrusted, sealedBy(stranger, wire.SealedKind(bytes.Repeat([]byte{1}, 80)))},
		{"sealed box that does not open", comms.RejectSealed, sealedBy(a.kp, wire.SealedKind(bytes.Repeat([]byte{1}, 80)))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := b.r.Stats().Rejected[c.reason]
			m, err := attacker.Request(subj, c.payload, 10*time.Second)
			if err != nil || len(m.Data) != 0 {
				t.Fatalf("a refused envelope: want an empty answer, got %v", err)
			}
			testutil.WaitFor(t, 10*time.Second, "the refusal to be counted", func() bool {
				return b.r.Stats().Rejected[c.reason] == before+1
			})
		})
	}
	if n := b.r.Inbox().Len(); n != 0 {
		t.Fatalf("%d forged envelopes admitted", n)
	}
	if st := b.relay.Status(); st.Refused != uint64(len(cases)) {
		t.Fatalf("status counts %d refused, want %d", st.Refused, len(cases))
	}
}

// Three servers in a cluster, three nodes each on its own server: they
// exchange messages and requests; then the server of the receiving node
// is shut down in the middle of a stream of sends. The clients reconnect
// to the others, and every acknowledged envelope is in the inbox exactly
// once.
func TestClusterServerKilledMidStream(t *testing.T) {
	testutil.CheckGoroutines(t)
	servers := natstest.Cluster(t, 3, "", true)
	nodes := newNodes(t, 3)
	all := ""
	for _, s := range servers {
		if all != "" {
			all += ","
		}
		all += s.ClientURL()
	}
	for i, nd := range nodes {
		// Each node starts on its own server and knows the others to
		// reconnect to.
		nd.connect(t, servers[i].ClientURL()+","+all, Options{Name: fmt.Sprintf("n%d", i)})
	}
	ctx := ctxT(t)
	for i, from := range nodes {
		for j := range nodes {
			if i == j {
				continue
			}
			// A node's subscription reaches the other servers of the
			// cluster a little after it is connected: until then a send
			// through them finds no responder (and delivers nothing).
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				_, err := from.r.SendMessage(ctx, fmt.Sprintf("n%d", j), fmt.Sprintf("%d→%d", i, j))
				if err == nil {
					break
				}
				if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
					t.Fatalf("n%d → n%d: %v", i, j, err)
				}
			}
		}
	}
	for _, nd := range nodes {
		waitItems(t, nd, 2)
	}

	// n0 sends a stream to n2; n2's server goes down in the middle. Each
	// envelope is sent again, same id, until it is acknowledged.
	const total = 300
	victim := -1
	for i, s := range servers {
		if s.ClientURL() == nodes[2].relay.Status().Server {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("n2 is connected to none of the servers: %+v", nodes[2].relay.Status())
	}
	sent := make([]identity.UUID, 0, total)
	for i := range total {
		if i == total/3 {
			servers[victim].Shutdown()
		}
		s, err := nodes[0].r.Seal("n2", wire.Message(fmt.Sprintf("m%03d", i)))
		if err != nil {
			t.Fatal(err)
		}
		for attempt := 0; ; attempt++ {
			err := nodes[0].r.Deliver(ctx, comms.Delivery{To: s.Peer.ID, ID: s.ID, Payload: s.Payload, WantAck: true})
			if err == nil {
				break
			}
			if attempt > 200 || ctx.Err() != nil {
				t.Fatalf("envelope %d never acknowledged: %v", i, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		sent = append(sent, s.ID)
	}
	got := waitItems(t, nodes[2], total)
	seen := map[identity.UUID]int{}
	for _, it := range got {
		seen[it.Envelope.ID]++
	}
	for i, id := range sent {
		if seen[id] != 1 {
			t.Fatalf("envelope %d was delivered %d times", i, seen[id])
		}
	}
	if len(got) != total {
		t.Fatalf("%d items for %d envelopes", len(got), total)
	}
	if st := nodes[2].relay.Status(); st.Reconnects == 0 || st.State != "connected" {
		t.Fatalf("n2 did not reconnect: %+v", st)
	}
}

// A peer with a direct address and "nats": true is reached directly when
// it can be, and through NATS when its direct address cannot be
// connected to.
func TestDirectAddressFallsBackToNATS(t *testing.T) {
	testutil.CheckGoroutines(t)
	s := startServer(t, "s1", "max_payload: 65536", nil, "")
	nodes := newNodes(t, 2)
	a, b := nodes[0], nodes[1]
	dead, err := transport.ParseAddr("uds://" + t.TempDir() + "/nobody.sock")
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.r.Trust().Without("n1")
	if err != nil {
		t.Fatal(err)
	}
	if l, err = l.With(trust.Peer{Name: "n1", ID: b.kp.ID(), Addr: dead, NATS: true}); err != nil {
		t.Fatal(err)
	}
	a.r.SetTrust(l)
	// Without a relay the direct failure is what the caller sees.
	_, err = a.r.SendMessage(ctxT(t), "n1", "x")
	var off *comms.PeerOfflineError
	if !errors.As(err, &off) || off.Reason != comms.OfflineRefused {
		t.Fatalf("direct send to a dead socket without NATS: %v", err)
	}
	a.connect(t, s.ClientURL(), Options{})
	b.connect(t, s.ClientURL(), Options{})
	id, err := a.r.SendMessage(ctxT(t), "n1", "through NATS after all")
	if err != nil {
		t.Fatal(err)
	}
	if it := waitItems(t, b, 1)[0]; it.Envelope.ID != id || it.Envelope.Kind.Body() != "through NATS after all" {
		t.Fatalf("b got %+v", it.Envelope)
	}
	// Too large for the NATS server but not for the peer: the send
	// fails as the direct address did, to be tried again, not as too
	// large (which would make a reliable one a dead letter at once).
	_, err = a.r.SendMessage(ctxT(t), "n1", strings.Repeat("x", 100_000))
	if !errors.As(err, &off) || off.Reason != comms.OfflineRefused || errors.Is(err, wire.ErrTooLarge) || !strings.Contains(err.Error(), "too large to go through NATS") {
		t.Fatalf("a send too large for NATS, direct address dead: %v", err)
	}
}

// A peer that does not trust the sender refuses at once, as a socket
// closed without an ack does, rather than after the ack timeout.
func TestUntrustingPeerRefusesAtOnce(t *testing.T) {
	testutil.CheckGoroutines(t)
	s := startServer(t, "s1", "", nil, "")
	nodes := newNodes(t, 2)
	a, b := nodes[0], nodes[1]
	none, err := b.r.Trust().Without("n0")
	if err != nil {
		t.Fatal(err)
	}
	b.r.SetTrust(none)
	a.connect(t, s.ClientURL(), Options{})
	b.connect(t, s.ClientURL(), Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second) // under the ack timeout of 5 s
	defer cancel()
	_, err = a.r.SendMessage(ctx, "n1", "who are you")
	var off *comms.PeerOfflineError
	if !errors.As(err, &off) || off.Reason != comms.OfflineClosed {
		t.Fatalf("send to a peer that does not trust us: %v", err)
	}
	if got := b.r.Stats().Rejected[comms.RejectUntrusted]; got != 1 {
		t.Fatalf("b counted %d untrusted", got)
	}
}

// A node answers (an ack, or a refusal's empty message) only into a reply
// inbox, and an ack only into its verified sender's: the reply subject is
// whatever the publisher wrote, and the answer goes out with the node's
// permissions, so anyone on the deployment could otherwise have a node
// publish to the JetStream API (deleting the stream, say) or anywhere else.
func TestAnswersOnlyIntoReplyInboxes(t *testing.T) {
	testutil.CheckGoroutines(t)
	s := startServer(t, "s1", "", nil, "")
	nodes := newNodes(t, 2)
	a, b := nodes[0], nodes[1]
	b.connect(t, s.ClientURL(), Options{})
	attacker := rawConn(t, s.ClientURL())
	watch := rawConn(t, s.ClientURL())
	stranger, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	inbox := inboxPrefix + stranger.ID().UUID().String() + ".probe"
	other := identity.NewUUID().String()
	got := make(chan *nats.Msg, 16)
	for _, subj := range []string{"$JS.API.>", "victim.>", "_INBOX_not-a-uuid.>", inboxPrefix + other + ".>", inbox} {
		sub, err := watch.ChanSubscribe(subj, got)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	sealed := func() []byte {
		e, err := wire.Seal(a.kp, identity.NewUUID(), b.kp.ID(), wire.Message("hello"))
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	cases := []struct {
		name, reply string
		payload     []byte
		admitted    bool
	}{
		{"junk, reply to the stream API", "$JS.API.STREAM.DELETE.MEERKAT", []byte("junk"), false},
		{"junk, reply to any subject", "victim.subject", []byte("junk"), false},
		{"junk, reply to a malformed inbox", "_INBOX_not-a-uuid.x", []byte("junk"), false},
		{"a valid envelope, reply to the stream API", "$JS.API.STREAM.PURGE.MEERKAT", sealed(), true},
		{"a valid envelope, reply to another node's inbox", "_INBOX_" + other + ".x", sealed(), true},
	}
	subj := Subject("meerkat", b.kp.ID())
	for i, c := range cases {
		before := b.relay.Status().Received
		if err := attacker.PublishMsg(&nats.Msg{Subject: subj, Reply: c.reply, Data: c.payload}); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, c.name+": handled", func() bool {
			st := b.relay.Status()
			return st.Received == before+1 && (c.admitted && b.r.Inbox().Len() == i-2 || !c.admitted && st.Refused == uint64(i+1))
		})
	}
	// A refusal to a node's reply inbox is still answered: the answers
	// above would have come before it.
	if err := attacker.PublishMsg(&nats.Msg{Subject: subj, Reply: inbox, Data: []byte("junk")}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.Subject != inbox || len(m.Data) != 0 {
			t.Fatalf("the node answered on %s (%d bytes), want only the empty refusal on %s", m.Subject, len(m.Data), inbox)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no refusal answered into a reply inbox")
	}
	select {
	case m := <-got:
		t.Fatalf("the node also answered on %s", m.Subject)
	default:
	}
}

func TestReplyInbox(t *testing.T) {
	u := identity.NewUUID()
	for _, c := range []struct {
		subj string
		ok   bool
	}{
		{inboxPrefix + u.String() + ".abc", true},
		{inboxPrefix + u.String() + ".nuid.token", true},
		{inboxPrefix + u.String() + ".", false},
		{inboxPrefix + u.String(), false},
		{inboxPrefix + strings.ToUpper(u.String()) + ".x", false},
		{inboxPrefix + "not-a-uuid.x", false},
		{inboxPrefix + u.String() + ".*", false},
		{inboxPrefix + u.String() + ".>", false},
		{inboxPrefix + u.String() + ".a b", false},
		{"_INBOX." + u.String() + ".x", false},
		{"$JS.API.STREAM.DELETE.MEERKAT", false},
		{"meerkat.node." + u.String(), false},
		{"", false},
	} {
		got, ok := replyInbox(c.subj)
		if ok != c.ok || ok && got != u {
			t.Errorf("replyInbox(%q) = %v, %v; want ok %v", c.subj, got, ok, c.ok)
		}
	}
}

// FuzzReplyInbox checks that replyInbox never panics and accepts only
// subjects it would build itself: the prefix, the UUID it returns, ".",
// and more.
func FuzzReplyInbox(f *testing.F) {
	f.Add(inboxPrefix + identity.NewUUID().String() + ".x")
	f.Add("$JS.API.STREAM.DELETE.MEERKAT")
	f.Add(inboxPrefix + "." + "x")
	f.Fuzz(func(t *testing.T, subj string) {
		u, ok := replyInbox(subj)
		if !ok {
			return
		}
		rest, found := strings.CutPrefix(subj, inboxPrefix+u.String()+".")
		if !found || rest == "" || strings.ContainsAny(rest, " \t\r\n*>") {
			t.Fatalf("replyInbox(%q) accepted it as %v", subj, u)
		}
	})
}

func TestRedeliverDelay(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{5, 16 * time.Second}, {6, 30 * time.Second}, {7, 30 * time.Second}, {1 << 40, 30 * time.Second},
	} {
		if got := redeliverDelay(c.n); got != c.want {
			t.Errorf("redeliverDelay(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}

// A stored message refused for a reason that may pass later is asked
// again; one refused for good is terminated.
func TestTakenLater(t *testing.T) {
	later := []string{comms.RejectInboxFull, comms.RejectStore, comms.RejectPeerShare, comms.RejectInFlight, comms.RejectNotServing}
	for _, r := range comms.RejectReasons {
		if got, want := takenLater(r), slices.Contains(later, r); got != want {
			t.Errorf("takenLater(%q) = %v, want %v", r, got, want)
		}
	}
}

// An envelope larger than the server's max_payload takes, once sealed,
// is refused as too large, saying so, before it goes out (and by
// CheckSealable, which a reliable send asks before it is queued); one
// within it goes through. With JetStream and without.
func TestLargerThanTheServerTakes(t *testing.T) {
	testutil.CheckGoroutines(t)
	const maxPayload = 64 << 10
	for _, js := range []bool{false, true} {
		t.Run(fmt.Sprint("jetstream=", js), func(t *testing.T) {
			s := startServer(t, "s1", fmt.Sprintf("max_payload: %d", maxPayload), nil, "")
			nodes := newNodes(t, 2)
			a, b := nodes[0], nodes[1]
			a.connect(t, s.ClientURL(), Options{JetStream: js})
			b.connect(t, s.ClientURL(), Options{JetStream: js})
			limit := maxPayload // a core NATS message has no headers
			if js {
				limit -= headerRoom
			}
			if got := a.relay.MaxEnvelope(); got != limit {
				t.Fatalf("MaxEnvelope = %d, want %d", got, limit)
			}
			ctx := ctxT(t)
			_, err := a.r.SendMessage(ctx, "n1", strings.Repeat("x", maxPayload))
			if !errors.Is(err, wire.ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprint("at most ", limit)) {
				t.Fatalf("a send over max_payload: %v; want too large, naming the limit", err)
			}
			seal := func(n int) []byte {
				e, err := wire.Seal(a.kp, identity.NewUUID(), b.kp.ID(), wire.Message(strings.Repeat("x", n)))
				if err != nil {
					t.Fatal(err)
				}
				p, err := e.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			big, small := seal(limit-200), seal(maxPayload/2)
			if err := a.r.CheckSealable(b.kp.ID(), identity.NewUUID(), big); !errors.Is(err, wire.ErrTooLarge) {
				t.Fatalf("CheckSealable of %d bytes: %v; want too large once sealed", len(big), err)
			}
			if err := a.r.CheckSealable(b.kp.ID(), identity.NewUUID(), small); err != nil {
				t.Fatalf("CheckSealable of %d bytes: %v", len(small), err)
			}
			body := strings.Repeat("y", limit-1024)
			if _, err := a.r.SendMessage(ctx, "n1", body); err != nil {
				t.Fatalf("a send within max_payload: %v", err)
			}
			if got := waitItems(t, b, 1); got[0].Envelope.Kind.Body() != body {
				t.Fatalf("b got a body of %d bytes", len(got[0].Envelope.Kind.Body()))
			}
		})
	}
}
