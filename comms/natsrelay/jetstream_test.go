package natsrelay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meerkatd/meerkatd/comms"
	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/natstest"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// leastPrivilegeConf is a server configuration with one user per node as
// docs/nats.md gives it (user ni, password pwi), and an administrative
// user that may create the stream.
func leastPrivilegeConf(t *testing.T, nodes []*testNode) string {
	var users []natstest.User
	for i, nd := range nodes {
		users = append(users, natstest.User{Name: fmt.Sprintf("n%d", i), Password: fmt.Sprintf("pw%d", i), PeerUUID: nd.kp.ID().UUID().String()})
	}
	return natstest.LeastPrivilege(t, "../../docs/nats.md", users...)
}

func nodeOpts(i int) Options {
	return Options{User: fmt.Sprintf("n%d", i), Password: fmt.Sprintf("pw%d", i)}
}

// jsNodeOpts is nodeOpts with JetStream.
func jsNodeOpts(i int) Options {
	o := nodeOpts(i)
	o.JetStream = true
	return o
}

// streamPair is two nodes, a server with their least-privilege users
// and the stream made by its administrator (neither node connected).
func streamPair(t *testing.T) (a, b *testNode, s *server.Server) {
	t.Helper()
	nodes := newNodes(t, 2)
	s = startServer(t, "s1", leastPrivilegeConf(t, nodes), nil, "")
	makeStream(t, s.ClientURL(), 1)
	return nodes[0], nodes[1], s
}

// makeStream creates the stream as an operator would, with the admin user.
func makeStream(t *testing.T, url string, replicas int) jetstream.Stream {
	t.Helper()
	nc := rawConn(t, url, nats.UserInfo(natstest.Admin, natstest.Admin))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.CreateStream(ctxT(t), jetstream.StreamConfig{
		Name: "MEERKAT", Subjects: []string{"meerkat.node.>"}, Retention: jetstream.WorkQueuePolicy,
		Replicas: replicas, Duplicates: time.Minute, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A node's credentials, as docs/nats.md writes them, cannot read another
// node's subject: the server refuses the subscription.
func TestLeastPrivilegeRefusesAnotherNodesSubject(t *testing.T) {
	testutil.CheckGoroutines(t)
	nodes := newNodes(t, 2)
	s := startServer(t, "s1", leastPrivilegeConf(t, nodes), nil, "")
	violations := make(chan error, 4)
	nc := rawConn(t, s.ClientURL(), nats.UserInfo("n0", "pw0"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		violations <- err
	}))
	other := Subject("meerkat", nodes[1].kp.ID())
	if _, err := nc.SubscribeSync(other); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	select {
	case err := <-violations:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), other) {
			t.Fatalf("subscribing to %s: %v", other, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not refuse a subscription to another node's subject")
	}
	// Its own subject is allowed: the node runs with these credentials.
	nodes[0].connect(t, s.ClientURL(), nodeOpts(0))
	nodes[1].connect(t, s.ClientURL(), nodeOpts(1))
	if _, err := nodes[1].r.SendMessage(ctxT(t), "n0", "allowed"); err != nil {
		t.Fatalf("send under least privilege: %v", err)
	}
	if got := waitItems(t, nodes[0], 1)[0].Envelope.Kind.Body(); got != "allowed" {
		t.Fatalf("n0 read %q", got)
	}
}

// With JetStream, a recipient that is offline while 1,000 reliable
// messages are sent receives each exactly once, in order, once it is
// back; the sender's sends complete only on the recipient's acks; and
// nothing stored in the stream holds a body in the clear.
func TestJetStreamOfflineRecipient(t *testing.T) {
	testutil.CheckGoroutines(t)
	nodes := newNodes(t, 2)
	a, b := nodes[0], nodes[1]
	s := startServer(t, "s1", leastPrivilegeConf(t, nodes), nil, "")
	stream := makeStream(t, s.ClientURL(), 1)
	// b reads once, so its durable consumer exists, then goes away.
	b.connect(t, s.ClientURL(), jsNodeOpts(1))
	b.relay.Close()

	a.connect(t, s.ClientURL(), jsNodeOpts(0))
	const total = 1000
	ctx := ctxT(t)
	sealed := make([]comms.Sealed, total)
	for i := range sealed {
		var err error
		if sealed[i], err = a.r.Seal("n1", wire.Message(fmt.Sprintf("secret-%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Every envelope reaches the broker, none is acknowledged: b is away.
	short, cancel := context.WithTimeout(ctx, 2*time.Second) // long enough for the broker to store it
	err := a.r.Deliver(short, comms.Delivery{To: b.kp.ID(), ID: sealed[0].ID, Payload: sealed[0].Payload, WantAck: true})
	cancel()
	var off *comms.PeerOfflineError
	if !errors.As(err, &off) {
		t.Fatalf("a send to an offline recipient: %v", err)
	}
	for _, sd := range sealed[1:] {
		// Published in order; the attempt stops waiting for its ack as
		// soon as the broker has stored the envelope.
		stored, cancel := context.WithCancel(ctx)
		a.r.Deliver(stored, comms.Delivery{To: b.kp.ID(), ID: sd.ID, Payload: sd.Payload, WantAck: true, Queued: cancel})
		cancel()
	}
	if st := a.relay.Status(); st.Stored != total {
		t.Fatalf("stored_in_broker %d, want %d", st.Stored, total)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != total {
		t.Fatalf("the stream holds %d messages, want %d", info.State.Msgs, total)
	}
	// Scan every stored message: sealed envelopes, no body in the clear.
	admin := rawConn(t, s.ClientURL(), nats.UserInfo(natstest.Admin, natstest.Admin))
	ajs, _ := jetstream.New(admin)
	astream, err := ajs.Stream(ctx, "MEERKAT")
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := astream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream message %d: %v", seq, err)
		}
		if bytes.Contains(m.Data, []byte("secret-")) {
			t.Fatalf("stream message %d holds a body in the clear", seq)
		}
		if e, err := wire.Decode(m.Data); err != nil || e.Kind.Type() != wire.TypeSealed {
			t.Fatalf("stream message %d is not a sealed envelope (%v)", seq, err)
		}
	}

	// b comes back and reads what waited, in order, once each.
	b.connect(t, s.ClientURL(), jsNodeOpts(1))
	got := waitItems(t, b, total)
	if len(got) != total {
		t.Fatalf("b received %d items, want %d", len(got), total)
	}
	for i, it := range got {
		if want := fmt.Sprintf("secret-%04d", i); it.Envelope.Kind.Body() != want || it.Envelope.ID != sealed[i].ID {
			t.Fatalf("item %d is %q, want %q", i, it.Envelope.Kind.Body(), want)
		}
	}
	// b's signed acks reach a through a's own subject.
	testutil.WaitFor(t, 60*time.Second, "a to receive b's acks", func() bool { return a.relay.Status().Received >= total })
	// Each send now completes on b's signed ack (kept while nobody
	// waited), without being stored again.
	for i, sd := range sealed {
		var err error
		for try := 0; try < 100; try++ {
			if err = a.r.Deliver(ctx, comms.Delivery{To: b.kp.ID(), ID: sd.ID, Payload: sd.Payload, WantAck: true}); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("envelope %d: %v", i, err)
		}
	}
	if st := a.relay.Status(); st.Stored != total {
		t.Fatalf("acks found waiting were published again: stored_in_broker %d, want %d", st.Stored, total)
	}
	if extra := b.r.Inbox().Len(); extra != 0 {
		t.Fatalf("b received %d more", extra)
	}
}

// storedWhileAway starts a JetStream server and two nodes whose stream
// holds at most max messages; b goes away once it has made the stream
// and its consumer, and a stores kept messages for it ("kept-0"…).
func storedWhileAway(t *testing.T, max int64, kept int) (s *server.Server, a, b *testNode, jsOpts Options) {
	t.Helper()
	nodes := newNodes(t, 2)
	a, b = nodes[0], nodes[1]
	s = startServer(t, "s1", "", nil, "")
	jsOpts = Options{JetStream: true, StreamMaxMsgs: max}
	b.connect(t, s.ClientURL(), jsOpts) // creates the stream and b's consumer
	b.relay.Close()
	a.connect(t, s.ClientURL(), jsOpts)
	ctx := ctxT(t)
	for i := range kept {
		sd, err := a.r.Seal("n1", wire.Message(fmt.Sprintf("kept-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		stored, cancel := context.WithCancel(ctx)
		a.r.Deliver(stored, comms.Delivery{To: b.kp.ID(), ID: sd.ID, Payload: sd.Payload, WantAck: true, Queued: cancel})
		cancel()
	}
	return s, a, b, jsOpts
}

// The stream a node creates refuses new messages once full instead of
// dropping stored ones: anyone on the deployment may publish on the node
// subjects, and must not push out the envelopes stored for a peer that is
// away. What was refused stays with its sender, to be tried again.
func TestJetStreamFullStreamKeepsStoredEnvelopes(t *testing.T) {
	testutil.CheckGoroutines(t)
	const kept = 3
	s, a, b, jsOpts := storedWhileAway(t, 10, kept)
	ctx := ctxT(t)
	if st := a.relay.Status(); st.Stored != kept {
		t.Fatalf("stored_in_broker %d, want %d", st.Stored, kept)
	}
	// Junk on a subject nobody reads, past the stream's limit.
	js, err := jetstream.New(rawConn(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i := range 10 {
		if _, err := js.Publish(ctx, "meerkat.node.00000000-0000-4000-8000-000000000000", []byte(fmt.Sprint("junk ", i))); err != nil {
			refused++
		}
	}
	if refused != kept {
		t.Fatalf("%d junk messages refused, want %d (the stream full at 10)", refused, kept)
	}
	// A send into the full stream fails saying so, not as a peer away.
	sd, err := a.r.Seal("n1", wire.Message("no room"))
	if err != nil {
		t.Fatal(err)
	}
	err = a.r.Deliver(ctx, comms.Delivery{To: b.kp.ID(), ID: sd.ID, Payload: sd.Payload, WantAck: true})
	if !errors.Is(err, ErrStreamFull) || !strings.Contains(err.Error(), "maximum messages") || strings.Count(err.Error(), "nats: ") > 0 {
		t.Fatalf("a send into the full stream: %v", err)
	}
	b.connect(t, s.ClientURL(), jsOpts)
	got := waitItems(t, b, kept)
	for i, it := range got {
		if want := fmt.Sprintf("kept-%d", i); it.Envelope.Kind.Body() != want {
			t.Fatalf("item %d is %q, want %q", i, it.Envelope.Kind.Body(), want)
		}
	}
}

// An ack the stream refuses (full) is not lost: the envelope it
// acknowledges stays unsettled and comes back, and its ack is sent
// again once the stream has room; status says why meanwhile.
func TestJetStreamAckIntoFullStreamSentAgain(t *testing.T) {
	testutil.CheckGoroutines(t)
	const max, kept = 10, 3
	s, a, b, jsOpts := storedWhileAway(t, max, kept)
	ctx := ctxT(t)
	// Junk on a subject nobody reads fills the stream.
	const junk = "meerkat.node.00000000-0000-4000-8000-000000000000"
	js, err := jetstream.New(rawConn(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	for i := range max - kept {
		if _, err := js.Publish(ctx, junk, []byte(fmt.Sprint("junk ", i))); err != nil {
			t.Fatal(err)
		}
	}
	// b comes back, takes the three, and its acks find no room.
	b.connect(t, s.ClientURL(), jsOpts)
	waitItems(t, b, kept)
	testutil.WaitFor(t, 20*time.Second, "b to report the refused ack", func() bool {
		return strings.Contains(b.relay.Status().LastError, "did not store this node's ack")
	})
	if n := a.relay.Status().Received; n != 0 {
		t.Fatalf("a received %d messages while the stream was full", n)
	}
	// Room again: the envelopes come back to b, which acknowledges
	// them again, and the acks reach a.
	stream, err := js.Stream(ctx, "MEERKAT")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(junk)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "the acks to reach a", func() bool {
		return a.relay.Status().Received >= kept
	})
	if extra := b.r.Inbox().Len(); extra != 0 {
		t.Fatalf("b's inbox got %d more items: the repeats were admitted again", extra)
	}
}

// jsTwoNodes starts a JetStream server on a free loopback port with its
// store in store, and two nodes logging to logs; the first has sent the
// second one message through the stream.
func jsTwoNodes(t *testing.T, store string) (port int, s *server.Server, nodes []*testNode, logs *testutil.SyncBuffer) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	s = natstest.ServerAt(t, port, store)
	nodes = newNodes(t, 2)
	logs = new(testutil.SyncBuffer) // both nodes'
	for _, nd := range nodes {
		nd.connect(t, s.ClientURL(), Options{JetStream: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	}
	if _, err := nodes[0].r.SendMessage(ctxT(t), "n1", "before"); err != nil {
		t.Fatalf("a first send: %v", err)
	}
	waitItems(t, nodes[1], 1)
	return port, s, nodes, logs
}

// A server that loses its JetStream data (here, the server replaced by
// one on the same address with an empty store) gets the stream and each
// node's consumer back from the nodes themselves: sends through it work
// again and arrive, without a restart of the nodes.
func TestJetStreamStreamLostIsMadeAgain(t *testing.T) {
	testutil.CheckGoroutines(t)
	port, first, nodes, logs := jsTwoNodes(t, t.TempDir())
	a, b := nodes[0], nodes[1]
	ctx := ctxT(t)
	first.Shutdown()
	first.WaitForShutdown()
	second := natstest.ServerAt(t, port, t.TempDir()) // its store is empty
	testutil.WaitFor(t, 30*time.Second, "a send through the stream made again", func() bool {
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := a.r.SendMessage(short, "n1", "after")
		return err == nil
	})
	// The sends tried before b's consumer was back arrive too: each is
	// "after" (one with no stream was never stored).
	for _, it := range waitItems(t, b, 1) {
		if it.Envelope.Kind.Body() != "after" {
			t.Fatalf("b received %q", it.Envelope.Kind.Body())
		}
	}
	js, err := jetstream.New(rawConn(t, second.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, "MEERKAT"); err != nil {
		t.Fatalf("the stream after the repair: %v", err)
	}
	// The node that made the stream again says it was lost; the other,
	// finding the stream made, says its consumer was gone (nothing a
	// server's ordinary restart makes them say). b's consumer was made
	// again in any case.
	said := logs.String()
	if !strings.Contains(said, "the stream was gone from the server (its JetStream data lost?)") {
		t.Fatalf("the nodes' log after the stream was lost: %s", said)
	}
	if strings.Contains(said, "level=INFO msg=\"NATS: the reading of this node's consumer stopped or failed") {
		t.Fatalf("a node took the loss for a restart: %s", said)
	}
}

// With least-privilege users, which may not create the stream, a lost
// stream is tried again until an operator makes it, and each node then
// makes its consumer again: nothing is deaf until a restart.
func TestJetStreamStreamLostOperatorMakesItAgain(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b, s := streamPair(t)
	a.connect(t, s.ClientURL(), jsNodeOpts(0))
	b.connect(t, s.ClientURL(), jsNodeOpts(1))
	ctx := ctxT(t)
	if _, err := a.r.SendMessage(ctx, "n1", "before"); err != nil {
		t.Fatalf("before the loss: %v", err)
	}
	waitItems(t, b, 1)

	admin := rawConn(t, s.ClientURL(), nats.UserInfo(natstest.Admin, natstest.Admin))
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := ajs.DeleteStream(ctx, "MEERKAT"); err != nil {
		t.Fatal(err)
	}
	// A send while it is gone fails (and has the nodes look), and they
	// cannot make it.
	short, cancel := context.WithTimeout(ctx, time.Second)
	_, err = a.r.SendMessage(short, "n1", "while gone")
	cancel()
	if err == nil {
		t.Fatal("a send with no stream succeeded")
	}
	time.Sleep(1500 * time.Millisecond) // a failed repair or two
	makeStream(t, s.ClientURL(), 1)
	testutil.WaitFor(t, 45*time.Second, "a send through the stream the operator made again", func() bool {
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := a.r.SendMessage(short, "n1", "after")
		return err == nil
	})
	// The sends tried before b's consumer was back arrive too: every one
	// is "after" (the one sent with no stream was never stored).
	for _, it := range waitItems(t, b, 1) {
		if it.Envelope.Kind.Body() != "after" {
			t.Fatalf("b received %q", it.Envelope.Kind.Body())
		}
	}
}

// A node with JetStream off sending to a peer whose subject a stream of
// the deployment captures gets the stream's acknowledgement as the reply
// to its request: the send fails saying so (not as an invalid ack, nor as
// stored: the peer may have taken it directly, its ack dropped), and
// status says it too.
func TestJetStreamOffSenderToAStream(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b, s := streamPair(t)
	b.connect(t, s.ClientURL(), jsNodeOpts(1)) // its durable consumer exists; then it goes away
	b.relay.Close()

	a.connect(t, s.ClientURL(), nodeOpts(0)) // JetStream off
	ctx := ctxT(t)
	sd, err := a.r.Seal("n1", wire.Message("to a stream"))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = a.r.Deliver(short, comms.Delivery{To: b.kp.ID(), ID: sd.ID, Payload: sd.Payload, WantAck: true})
	cancel()
	var off *comms.PeerOfflineError
	if !errors.As(err, &off) || off.Reason == comms.OfflineBadAck || !errors.Is(err, errStreamAck) {
		t.Fatalf("a send a stream answered: %v, want the stream's answer named", err)
	}
	if st := a.relay.Status(); st.Stored != 0 || !strings.Contains(st.LastError, "nats.jetstream alike on every node") {
		t.Fatalf("status after it: %+v", st)
	}
}

// A node with JetStream sending to a peer with JetStream off: the peer
// takes the envelope straight from its subject, and its ack goes to the
// sender's own subject, where the stream stores it for the sender's
// consumer, not into the reply inbox of the sender's publish (which the
// stream's own acknowledgement answers): the send completes acknowledged,
// rather than stored in the broker with no ack ever coming.
func TestJetStreamSenderToAPeerWithout(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b, s := streamPair(t)
	a.connect(t, s.ClientURL(), jsNodeOpts(0))
	b.connect(t, s.ClientURL(), nodeOpts(1)) // JetStream off
	ctx := ctxT(t)
	for i := range 3 {
		sd, err := a.r.Seal("n1", wire.Message(fmt.Sprintf("to a peer without JetStream %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = a.r.Deliver(short, comms.Delivery{To: b.kp.ID(), ID: sd.ID, Payload: sd.Payload, WantAck: true})
		cancel()
		if err != nil {
			t.Fatalf("send %d: %v, want it acknowledged", i, err)
		}
	}
	if got := waitItems(t, b, 3); len(got) != 3 {
		t.Fatalf("b received %d items, want 3", len(got))
	}
}

func TestIsStreamAck(t *testing.T) {
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	env, err := wire.Seal(kp, identity.NewUUID(), kp.ID(), wire.Ack(identity.NewUUID()))
	if err != nil {
		t.Fatal(err)
	}
	envBytes, err := env.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		data string
		want bool
	}{
		{`{"stream":"MEERKAT","seq":12}`, true},
		{`{"stream":"MEERKAT","domain":"hub","seq":3,"duplicate":true}`, true},
		{`{"stream":"","seq":12}`, false},
		{`{"stream":"MEERKAT"}`, false},
		{`{"error":{"code":503}}`, false},
		{`{"stream":"MEERKAT","seq":12`, false},
		{`[1]`, false},
		{``, false},
		{string(envBytes), false},
	} {
		if got := isStreamAck([]byte(tc.data)); got != tc.want {
			t.Errorf("isStreamAck(%q) = %v, want %v", tc.data, got, tc.want)
		}
	}
}

func FuzzIsStreamAck(f *testing.F) {
	f.Add([]byte(`{"stream":"MEERKAT","seq":12}`))
	f.Add([]byte(`{"stream":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if isStreamAck(data) && (len(data) == 0 || data[0] != '{' || !json.Valid(data)) {
			t.Fatalf("isStreamAck(%q): true for what is no JSON object", data)
		}
		if _, err := wire.Decode(data); err == nil && isStreamAck(data) {
			t.Fatalf("isStreamAck(%q): true for an envelope", data)
		}
	})
}

// A least-privilege user (docs/nats.md) may not create the stream: the
// server reports a permission violation, on its own, and never answers
// the creation, which therefore stops at that report rather than waiting
// for its deadline. The error says what the server reported.
func TestJetStreamNoStreamNoRightToCreateIt(t *testing.T) {
	testutil.CheckGoroutines(t)
	nodes := newNodes(t, 1)
	s := startServer(t, "s1", leastPrivilegeConf(t, nodes), nil, "")
	opts := jsNodeOpts(0)
	opts.Servers = []string{s.ClientURL()}
	opts.ConnectTimeout = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rl, err := Start(ctx, nodes[0].r, opts)
	if err == nil {
		rl.Close()
		t.Fatal("Start made a stream this user may not create")
	}
	if !strings.Contains(err.Error(), "stream MEERKAT") || !strings.Contains(err.Error(), "the server reported: ") || !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
		t.Fatalf("Start: %v; want the stream named and the server's permission violation", err)
	}
	if !errors.Is(err, errDenied) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("Start: %v (its context: %v); want it refused at the server's report, before the deadline", err, ctx.Err())
	}
}

// A node's consumer deleted while its stream stays (an operator's
// mistake, or another node that made the stream again first): the node
// makes it again and says it was gone, at warn, not as a restart.
func TestJetStreamConsumerDeletedIsMadeAgain(t *testing.T) {
	testutil.CheckGoroutines(t)
	a, b, s := streamPair(t)
	var logs testutil.SyncBuffer
	opts := jsNodeOpts(1)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	b.connect(t, s.ClientURL(), opts)
	a.connect(t, s.ClientURL(), jsNodeOpts(0))
	ctx := ctxT(t)
	// b has read through its consumer: the one made again knows less.
	if _, err := a.r.SendMessage(ctx, "n1", "before"); err != nil {
		t.Fatal(err)
	}
	waitItems(t, b, 1)
	admin := rawConn(t, s.ClientURL(), nats.UserInfo(natstest.Admin, natstest.Admin))
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := ajs.DeleteConsumer(ctx, "MEERKAT", b.relay.durable()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "b's consumer made again", func() bool {
		return strings.Contains(logs.String(), "this node's consumer was gone from the server")
	})
	if strings.Contains(logs.String(), "a server restart?") {
		t.Fatalf("the deletion taken for a restart: %s", logs.String())
	}
	if _, err := a.r.SendMessage(ctx, "n1", "after"); err != nil {
		t.Fatalf("a send through the consumer made again: %v", err)
	}
	waitItems(t, b, 1)
}

// An envelope the stream stored for a recipient that is away is not
// stored again when its outbox attempts it again past the duplicate
// window: a copy per window would fill the stream. Once the stream holds
// nothing for the recipient (the envelope lost: purged here), a repeat is
// published again, and stored.
func TestJetStreamStoredNotStoredAgain(t *testing.T) {
	testutil.CheckGoroutines(t)
	nodes := newNodes(t, 2)
	a, b := nodes[0], nodes[1]
	s := startServer(t, "s1", "", nil, "")
	jsOpts := Options{JetStream: true, DedupWindow: 100 * time.Millisecond}
	b.connect(t, s.ClientURL(), jsOpts) // creates the stream and b's consumer
	b.relay.Close()
	a.connect(t, s.ClientURL(), jsOpts)
	saved := pendingFresh
	pendingFresh = 0 // ask the stream every time
	t.Cleanup(func() { pendingFresh = saved })
	ctx := ctxT(t)
	sd, err := a.r.Seal("n1", wire.Message("once"))
	if err != nil {
		t.Fatal(err)
	}
	deliver := func() {
		stored, cancel := context.WithCancel(ctx)
		a.r.Deliver(stored, comms.Delivery{To: b.kp.ID(), ID: sd.ID, Payload: sd.Payload, WantAck: true, Queued: cancel})
		cancel()
	}
	js, err := jetstream.New(rawConn(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	msgs := func() uint64 {
		t.Helper()
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	deliver()
	for range 3 {
		time.Sleep(200 * time.Millisecond) // past the duplicate window
		deliver()
	}
	if n, st := msgs(), a.relay.Status().Stored; n != 1 || st != 1 {
		t.Fatalf("after repeats past the duplicate window the stream holds %d messages (stored_in_broker %d), want 1", n, st)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(Subject(DefaultSubjectPrefix, b.kp.ID()))); err != nil {
		t.Fatal(err)
	}
	deliver()
	if n, st := msgs(), a.relay.Status().Stored; n != 1 || st != 2 {
		t.Fatalf("after the stored envelope was lost the stream holds %d messages (stored_in_broker %d), want it stored again", n, st)
	}
	b.connect(t, s.ClientURL(), jsOpts)
	if got := waitItems(t, b, 1); len(got) != 1 || got[0].Envelope.ID != sd.ID {
		t.Fatalf("b received %v", got)
	}
}

// A server restarted with its store (an upgrade, a reboot) keeps the
// stream and the consumers: the nodes read on, and none says its
// consumer or the stream was gone.
func TestJetStreamServerRestartKeepsConsumers(t *testing.T) {
	testutil.CheckGoroutines(t)
	store := t.TempDir()
	port, first, nodes, logs := jsTwoNodes(t, store)
	a, b := nodes[0], nodes[1]
	ctx := ctxT(t)
	first.Shutdown()
	first.WaitForShutdown()
	natstest.ServerAt(t, port, store) // the same store
	testutil.WaitFor(t, 30*time.Second, "a send after the restart", func() bool {
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := a.r.SendMessage(short, "n1", "after")
		return err == nil
	})
	waitItems(t, b, 1)
	// Each node's reading reports an error some seconds after such a
	// restart (the consumer's heartbeats stop), and is set up again: at
	// once here.
	for _, nd := range nodes {
		nd.relay.consumeErr.Store(true)
		nd.relay.checkJetStream()
	}
	testutil.WaitFor(t, 30*time.Second, "both readings set up again", func() bool {
		return strings.Count(logs.String(), "NATS: the reading of this node's consumer stopped or failed (a server restart?): set up again") >= 2
	})
	if said := logs.String(); strings.Contains(said, "was gone") {
		t.Fatalf("a node took the restart for a loss: %s", said)
	}
}
