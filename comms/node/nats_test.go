package node

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
	"github.com/meerkatd/meerkatd/internal/natstest"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// natsTestServer runs a nats-server on loopback for the test.
func natsTestServer(t *testing.T) string {
	t.Helper()
	return natstest.Server(t, "s1", "", nil, "", false).ClientURL()
}

// natsNode is a serving node with no peers whose [nats] servers are url.
func natsNode(t *testing.T, name, url string) *Node {
	t.Helper()
	h, _ := testHome(t, name, func(c *config.Config) {
		c.NATS.Servers = []string{url}
		c.NATS.ReconnectWaitMS = 50
	})
	var empty *trust.List
	if err := empty.Save(h.TrustPath()); err != nil {
		t.Fatal(err)
	}
	n := startTest(t, h, ModeServe)
	waitFor(t, 20*time.Second, name+" to connect to NATS", func() bool {
		st, err := n.Status(context.Background())
		return err == nil && st.NATS != nil && st.NATS.State == "connected"
	})
	return n
}

// Two daemons' nodes pair through NATS (a wrong code fails, and says so),
// then talk through it; status shows the connection.
func TestPairAndSendThroughNATS(t *testing.T) {
	url := natsTestServer(t)
	alice, bob := natsNode(t, "alice", url), natsNode(t, "bob", url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := alice.PairOffer(ctx, PairOptions{NATS: true})
	if err != nil || !strings.HasSuffix(o.Line, " nats:") {
		t.Fatalf("offer %+v, %v", o, err)
	}
	f := strings.Fields(o.Line)
	wrong := f[0] + " " + strings.Replace(f[1], f[1][:1], map[bool]string{true: "B", false: "A"}[f[1][0] == 'A'], 1) + " " + f[2]
	if _, err := bob.PairAccept(ctx, wrong, ""); CodeOf(err) != CodePairFailed || !strings.Contains(err.Error(), "no node answers that offer") {
		t.Fatalf("pairing through NATS with a wrong code: %v", err)
	}
	p, err := bob.PairAccept(ctx, o.Line, "")
	if err != nil || p.Name != "alice" || p.Addr != "nats:" || p.PubKey != alice.h.Key.ID().String() {
		t.Fatalf("accept: %+v, %v", p, err)
	}
	got, err := alice.PairWait(ctx, o.ID)
	if err != nil || got.Name != "bob" || got.Addr != "nats:" {
		t.Fatalf("alice's side: %+v, %v", got, err)
	}
	waitFor(t, 20*time.Second, "both nodes to read their trust files", func() bool {
		return alice.r.Trust().Len() == 1 && bob.r.Trust().Len() == 1
	})
	sent, err := bob.SendMessage(ctx, "alice", "through the broker", SendOptions{})
	if err != nil || sent.Delivery != "acked" {
		t.Fatalf("bob → alice: %+v, %v", sent, err)
	}
	// A body that fits a plain envelope but not a sealed one: a reliable
	// send of it to a peer reached only through NATS is refused as too
	// large, as a direct one is, not queued to become a dead letter.
	big := strings.Repeat("x", transport.MaxFrameSize-400)
	for _, opts := range []SendOptions{{Reliable: true, NoWait: true}, {}} {
		if _, err = alice.SendMessage(ctx, "bob", big, opts); CodeOf(err) != CodeBodyTooLarge {
			t.Fatalf("a large send (%+v): %v (%s), want %s", opts, err, CodeOf(err), CodeBodyTooLarge)
		}
	}
	// A request as large: refused, and no open request is left behind.
	params := `{"blob":"` + strings.Repeat("y", transport.MaxFrameSize-450) + `"}`
	if _, err = alice.SendRequest(ctx, "bob", "big", json.RawMessage(params), SendOptions{Reliable: true, NoWait: true}); CodeOf(err) != CodeBodyTooLarge {
		t.Fatalf("a large reliable request: %v (%s), want %s", err, CodeOf(err), CodeBodyTooLarge)
	}
	if rs, err := alice.Requests(ctx, RequestQuery{}); err != nil || len(rs) != 0 {
		t.Fatalf("requests after the refused one: %+v, %v", rs, err)
	}
	if dl, err := alice.DeadLetters(ctx); err != nil || len(dl) != 0 {
		t.Fatalf("dead letters after the large sends: %+v, %v", dl, err)
	}
	if ob, err := alice.Outbox(ctx); err != nil || len(ob.Entries) != 0 {
		t.Fatalf("outbox after the large sends: %+v, %v", ob.Entries, err)
	}
	st, err := alice.Status(ctx)
	if err != nil || st.NATS == nil || st.NATS.Received < 1 || st.NATS.Server != url {
		t.Fatalf("alice's status: %+v, %v", st.NATS, err)
	}
	if s := st.NATS.Summary(); !strings.HasPrefix(s, "connected to "+url) {
		t.Fatalf("summary %q", s)
	}
}

// A node whose NATS servers cannot be reached still starts and serves;
// its status says it is connecting and why.
func TestNATSDownAtStart(t *testing.T) {
	n := natsNodeUnreachable(t)
	st, err := n.Status(context.Background())
	if err != nil || st.NATS == nil || st.NATS.State != "connecting" {
		t.Fatalf("status %+v, %v", st.NATS, err)
	}
	waitFor(t, 20*time.Second, "the failed attempt to be reported", func() bool {
		st, _ := n.Status(context.Background())
		return st.NATS.LastError != ""
	})
	if _, err := n.PairOffer(context.Background(), PairOptions{NATS: true}); codeOfErr(err) != CodePeerOffline {
		t.Fatalf("offer through NATS while not connected: %v", err)
	}
	// A send to a nats: peer says the node is not connected yet, not
	// that it has no NATS connection at all.
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AddPeer(n.h, "far", kp.ID().String(), "nats:", false, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the node to trust far", func() bool { _, err := n.r.ResolvePeer("far"); return err == nil })
	_, err = n.SendMessage(context.Background(), "far", "hello", SendOptions{})
	if CodeOf(err) != CodePeerOffline || !strings.Contains(err.Error(), "not connected to NATS now") {
		t.Fatalf("send to a nats: peer while not connected: %v (%s)", err, CodeOf(err))
	}
}

// An offer through NATS while the connection is down (the server went
// away after the node connected) fails at once as peer_offline, as it
// does before the first connection: not a wait for the flush, not the
// command line's fault.
func TestPairOfferWhileNATSReconnects(t *testing.T) {
	srv := natstest.Server(t, "s1", "", nil, "", false)
	n := natsNode(t, "alice", srv.ClientURL())
	srv.Shutdown()
	waitFor(t, 20*time.Second, "the node to see the connection down", func() bool {
		st, err := n.Status(context.Background())
		return err == nil && st.NATS != nil && st.NATS.State != "connected"
	})
	_, err := n.PairOffer(context.Background(), PairOptions{NATS: true})
	if CodeOf(err) != CodePeerOffline || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("offer through NATS while reconnecting: %v (%s), want %s", err, CodeOf(err), CodePeerOffline)
	}
}

func natsNodeUnreachable(t *testing.T) *Node {
	t.Helper()
	h, _ := testHome(t, "lonely", func(c *config.Config) {
		c.NATS.Servers = []string{"nats://127.0.0.1:1"}
		c.NATS.ReconnectWaitMS = 50
		c.NATS.ConnectTimeoutMS = 200
	})
	return startTest(t, h, ModeServe)
}

// An ack that comes for an envelope already a dead letter (a broker held
// it past its time-to-live, then delivered it) takes it out of the dead
// letters: it was delivered, and a retry would send it again.
func TestLateAckLiftsDeadLetter(t *testing.T) {
	h, _ := testHome(t, "alice", nil)
	n := startTest(t, h, ModeServe)
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	e, err := n.obStore.Add(outbox.Entry{ID: identity.NewUUID(), To: kp.ID(), Peer: "far", Kind: "message", Payload: []byte{0xa0}, Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.obStore.Kill(e.ID, outbox.ReasonExpired+": "+outbox.ExpiredStored, time.Now()); err != nil {
		t.Fatal(err)
	}
	sent, err := n.sentStore()
	if err != nil {
		t.Fatal(err)
	}
	if err := sent.Put(store.SentRecord{ID: e.ID, To: kp.ID(), Peer: "far", Kind: "message", Reliable: true, State: store.SentDead, Created: time.Now(), Updated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if dl, err := n.DeadLetters(ctx); err != nil || len(dl) != 1 {
		t.Fatalf("dead letters before the ack: %+v, %v", dl, err)
	}
	// Its notice says the broker may still deliver it, not that it was
	// not delivered.
	n.noticeOutbox(outbox.Event{Type: outbox.EventExpired, Entry: e, Reason: outbox.ReasonExpired + ": " + outbox.ExpiredStored, Stored: true})
	if m := waitNotice(t, n, NoticeDeadLetter); !strings.Contains(m.Body, "may still deliver it") || strings.Contains(m.Body, "it was not delivered") {
		t.Fatalf("notice of an envelope a broker holds: %q", m.Body)
	}
	n.lateAck(kp.ID(), identity.NewUUID()) // another envelope's: nothing changes
	if dl, err := n.DeadLetters(ctx); err != nil || len(dl) != 1 {
		t.Fatalf("dead letters after another envelope's ack: %+v, %v", dl, err)
	}
	other, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	n.lateAck(other.ID(), e.ID) // its id, acked by another key: nothing changes
	if dl, err := n.DeadLetters(ctx); err != nil || len(dl) != 1 {
		t.Fatalf("dead letters after another key's ack of it: %+v, %v", dl, err)
	}
	n.lateAck(kp.ID(), e.ID)
	if dl, err := n.DeadLetters(ctx); err != nil || len(dl) != 0 {
		t.Fatalf("dead letters after its ack: %+v, %v", dl, err)
	}
}
