package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// twoHomes makes homes alice and bob that trust each other over their
// Unix sockets (and alice also carol at extra, if given). tune adjusts
// both configurations.
func twoHomes(t *testing.T, tune func(*config.Config), extra ...trust.Peer) (alice, bob *Home) {
	t.Helper()
	alice, _ = testHome(t, "alice", tune)
	bob, _ = testHome(t, "bob", tune)
	sock := func(h *Home) transport.Addr {
		ls, err := h.Config.Resolve(h.Dir)
		if err != nil {
			t.Fatal(err)
		}
		return ls.UDS
	}
	save := func(h *Home, peers ...trust.Peer) {
		l, err := trust.New(peers...)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Save(h.TrustPath()); err != nil {
			t.Fatal(err)
		}
	}
	save(alice, append([]trust.Peer{{Name: "bob", ID: bob.Key.ID(), Addr: sock(bob)}}, extra...)...)
	save(bob, trust.Peer{Name: "alice", ID: alice.Key.ID(), Addr: sock(alice)})
	return alice, bob
}

// slowRetries makes a failed attempt wait an hour and opens the breaker
// for an hour at the first failure: only a trigger delivers in time.
func slowRetries(c *config.Config) {
	c.Store.Mode = config.StoreMemory
	c.Outbox.Backoff = "1h"
	c.Outbox.BreakerFailures = 1
	c.Outbox.BreakerOpenSecs = 3600
}

// comeBackWithin is how soon a peer that comes back must get its mail.
const comeBackWithin = 2 * time.Second

// queueForBob sends alice's reliable message to bob, who is down, and
// waits until bob's breaker is open.
func queueForBob(t *testing.T, alice *Node) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent, err := alice.SendMessage(ctx, "bob", "while you were out", reliable)
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("reliable send to bob, down: %+v, %v", sent, err)
	}
	waitFor(t, 10*time.Second, "bob's breaker to open", func() bool {
		o, _ := alice.Outbox(ctx)
		return len(o.Peers) == 1 && o.Peers[0].Breaker == outbox.BreakerOpen
	})
	return sent.ID
}

// waitArrival waits up to d for the message id in n's inbox.
func waitArrival(t *testing.T, n *Node, id string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, err := n.Receive(context.Background(), Query{})
		if err == nil {
			for _, m := range b.Messages {
				if m.ID == id {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not delivered within %v", id, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A peer that comes back and connects to us gets its queued mail at once,
// not when its breaker's hour is up.
func TestComebackOnConnect(t *testing.T) {
	ha, hb := twoHomes(t, slowRetries)
	alice := startTest(t, ha, ModeServe)
	id := queueForBob(t, alice)
	bob := startTest(t, hb, ModeServe)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := bob.SendMessage(ctx, "alice", "back", SendOptions{}); err != nil {
		t.Fatal(err)
	}
	waitArrival(t, bob, id, comeBackWithin)
}

// A peer that comes back and announces itself on this host gets its
// queued mail at once, without sending anything.
func TestComebackOnAnnounce(t *testing.T) {
	ha, hb := twoHomes(t, slowRetries)
	dir := t.TempDir()
	alice := startTest(t, ha, ModeServe)
	unannounce, err := alice.Announce(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unannounce()
	id := queueForBob(t, alice)
	bob := startTest(t, hb, ModeServe)
	unannounceBob, err := bob.Announce(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unannounceBob()
	waitArrival(t, bob, id, comeBackWithin)
}

// A daemon restarted while its peer on this host is back already (its
// announcement there before the restart) tries its queue at once, not
// when the breaker its last run left open lets it.
func TestComebackAnnouncedBeforeRestart(t *testing.T) {
	ha, hb := twoHomes(t, func(c *config.Config) {
		slowRetries(c)
		c.Store.Mode = config.StoreSQLite // the outbox and its breaker outlive the restart
	})
	dir := t.TempDir()
	alice := startTest(t, ha, ModeServe)
	id := queueForBob(t, alice)
	alice.Close()
	bob := startTest(t, hb, ModeServe)
	unannounceBob, err := bob.Announce(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unannounceBob()
	alice = startTest(t, ha, ModeServe)
	if o, err := alice.Outbox(context.Background()); err != nil || len(o.Peers) != 1 || o.Peers[0].Breaker != outbox.BreakerOpen {
		t.Fatalf("alice's outbox after the restart: %+v, %v (want bob's breaker still open)", o, err)
	}
	unannounce, err := alice.Announce(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unannounce()
	waitArrival(t, bob, id, comeBackWithin)
}

// RetryOutbox delivers at once to a peer that is back, and the outbox
// shows due entries as due.
func TestRetryOutboxDelivers(t *testing.T) {
	ha, hb := twoHomes(t, slowRetries)
	alice := startTest(t, ha, ModeServe)
	id := queueForBob(t, alice)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := alice.Outbox(ctx)
	if err != nil || len(o.Entries) != 1 || o.Entries[0].Due || o.Peers[0].Due {
		t.Fatalf("outbox waiting an hour: %+v, %v", o, err)
	}
	if _, err := alice.RetryOutbox(ctx, "nobody"); codeOfErr(err) != CodeUnknownPeer {
		t.Fatalf("retry for an unknown peer: %v", err)
	}
	bob := startTest(t, hb, ModeServe) // up, but it sends nothing and announces nothing
	n, err := alice.RetryOutbox(ctx, "bob")
	if err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	waitArrival(t, bob, id, comeBackWithin)
	waitFor(t, 10*time.Second, "alice's outbox to empty", func() bool {
		o, _ := alice.Outbox(ctx)
		return len(o.Entries) == 0
	})
}

// Sends to a peer go in order: one queued behind an entry waiting out
// its backoff says it was not attempted, and the outbox shows it waiting
// for that entry's next attempt, not due.
func TestQueuedBehindABackoff(t *testing.T) {
	ha, _ := twoHomes(t, func(c *config.Config) {
		slowRetries(c)
		c.Outbox.BreakerFailures = 100 // the breaker stays closed: only the backoff holds the queue
	})
	alice := startTest(t, ha, ModeServe)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := alice.SendMessage(ctx, "bob", "one", reliable)
	if err != nil || first.Delivery != DeliveryQueued || first.Behind != 0 || first.LastError == "" {
		t.Fatalf("first send to bob, down: %+v, %v", first, err)
	}
	second, err := alice.SendMessage(ctx, "bob", "two", reliable)
	if err != nil || second.Delivery != DeliveryQueued || second.Behind != 1 || second.LastError != first.LastError {
		t.Fatalf("second send, behind the first: %+v, %v (want behind 1, the first's error)", second, err)
	}
	o, err := alice.Outbox(ctx)
	if err != nil || len(o.Entries) != 2 || len(o.Peers) != 1 || o.Peers[0].Breaker != outbox.BreakerClosed {
		t.Fatalf("outbox: %+v, %v", o, err)
	}
	head, behind := o.Entries[0], o.Entries[1]
	if head.Due || head.NextAttempt == nil || behind.Due || behind.NextAttempt == nil || !behind.NextAttempt.Equal(*head.NextAttempt) {
		t.Fatalf("entries %+v, %+v: want neither due, the second's next attempt the first's", head, behind)
	}
}

// DropQueued takes queued sends out into the dead letters; it needs the
// daemon, and ids that are envelope ids.
func TestDropQueued(t *testing.T) {
	ha, _ := twoHomes(t, func(c *config.Config) {
		slowRetries(c)
		c.Outbox.BreakerFailures = 100
	})
	alice := startTest(t, ha, ModeServe)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := alice.SendMessage(ctx, "bob", "one", reliable)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.DropQueued(ctx, []string{"not-an-id"}); codeOfErr(err) != CodeBadArgument {
		t.Fatalf("drop of a malformed id: %v", err)
	}
	if _, err := alice.DropQueued(ctx, nil); codeOfErr(err) != CodeBadArgument {
		t.Fatalf("drop of nothing: %v", err)
	}
	other := identity.NewUUID().String()
	d, err := alice.DropQueued(ctx, []string{first.ID, other})
	if err != nil || !slices.Equal(d.Dropped, []string{first.ID}) || !slices.Equal(d.NotQueued, []string{other}) || len(d.InFlight) != 0 {
		t.Fatalf("drop: %+v, %v", d, err)
	}
	dl, err := alice.DeadLetters(ctx)
	if err != nil || len(dl) != 1 || dl[0].ID != first.ID || !strings.HasPrefix(dl[0].Reason, outbox.ReasonDropped) {
		t.Fatalf("dead letters %+v, %v", dl, err)
	}
	if o, err := alice.Outbox(ctx); err != nil || len(o.Entries) != 0 {
		t.Fatalf("outbox after the drop: %+v, %v", o, err)
	}
	offline := startTest(t, ha, ModeSend)
	if _, err := offline.DropQueued(ctx, []string{first.ID}); codeOfErr(err) != CodeNoDaemon {
		t.Fatalf("drop without the daemon's outbox: %v", err)
	}
}

// While a peer's breaker is open, its first envelope's next attempt is
// the breaker's probe, not the envelope's own (longer) backoff; the
// peer's row says the same.
func TestOutboxShowsTheProbe(t *testing.T) {
	ha, _ := twoHomes(t, func(c *config.Config) {
		slowRetries(c)
		c.Outbox.BreakerOpenSecs = 60 // the probe, well before the hour's backoff
	})
	alice := startTest(t, ha, ModeServe)
	queueForBob(t, alice)
	o, err := alice.Outbox(context.Background())
	if err != nil || len(o.Peers) != 1 || len(o.Entries) != 1 || o.Peers[0].OpenUntil == nil {
		t.Fatalf("outbox: %+v, %v", o, err)
	}
	probe := *o.Peers[0].OpenUntil
	if e := o.Entries[0]; e.Due || e.NextAttempt == nil || !e.NextAttempt.Equal(probe) || !o.Peers[0].NextAttempt.Equal(probe) {
		t.Fatalf("entry %+v, peer %+v: want both at the probe, %v", e, o.Peers[0], probe)
	}
}

// A send the peer's open breaker holds back says until when.
func TestQueuedBehindAnOpenBreaker(t *testing.T) {
	ha, _ := twoHomes(t, slowRetries)
	alice := startTest(t, ha, ModeServe)
	queueForBob(t, alice)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := alice.Outbox(ctx)
	if err != nil || len(o.Peers) != 1 || o.Peers[0].OpenUntil == nil {
		t.Fatalf("outbox: %+v, %v", o, err)
	}
	sent, err := alice.SendMessage(ctx, "bob", "two", reliable)
	if err != nil || sent.Delivery != DeliveryQueued || sent.Behind != 1 || sent.BreakerOpenUntil == nil || !sent.BreakerOpenUntil.Equal(*o.Peers[0].OpenUntil) {
		t.Fatalf("send behind an open breaker: %+v, %v (want behind 1, breaker open until %v)", sent, err, o.Peers[0].OpenUntil)
	}
}

// A peer whose host name does not resolve shows it in last_error, and
// its breaker stays closed: it is retried on the slower schedule.
func TestResolveFailureShown(t *testing.T) {
	key, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	carol := trust.Peer{Name: "carol", ID: key.ID(), Addr: transport.Addr{Scheme: transport.SchemeTCP, Host: "carol.invalid", Port: 4242}}
	ha, _ := twoHomes(t, func(c *config.Config) { c.Store.Mode = config.StoreMemory; c.Outbox.BreakerFailures = 1 }, carol)
	alice := startTest(t, ha, ModeServe)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent, err := alice.SendMessage(ctx, "carol", "hello", reliable)
	if err != nil || sent.Delivery != DeliveryQueued {
		t.Fatalf("send to carol: %+v, %v", sent, err)
	}
	if !strings.HasPrefix(sent.LastError, outbox.ResolveFailed) {
		t.Fatalf("last error %q does not say the name did not resolve", sent.LastError)
	}
	o, err := alice.Outbox(ctx)
	if err != nil || len(o.Entries) != 1 || !strings.HasPrefix(o.Entries[0].LastError, outbox.ResolveFailed) ||
		len(o.Peers) != 1 || o.Peers[0].Breaker != outbox.BreakerClosed {
		t.Fatalf("outbox: %+v, %v", o, err)
	}
}

// An open breaker holds its peer's queue: nothing of it is due, and the
// next attempt shown is when the breaker lets one through, never a time
// already past; other peers are shown as they are.
func TestHoldForBreakers(t *testing.T) {
	now := time.Now().UTC()
	past, until := now.Add(-time.Minute), now.Add(time.Minute)
	info := Outbox{
		Peers: []PeerSendState{
			{Peer: "bob", PubKey: "kb", Queued: 1, Breaker: outbox.BreakerOpen, OpenUntil: &until, NextAttempt: &past},
			{Peer: "carol", PubKey: "kc", Queued: 1, Breaker: outbox.BreakerClosed, NextAttempt: &past, Due: true},
		},
		Entries: []QueuedSend{
			{Peer: "bob", PubKey: "kb", NextAttempt: &past, Due: true},
			{Peer: "carol", PubKey: "kc", NextAttempt: &past, Due: true},
		},
	}
	holdQueues(&info)
	bob, carol := info.Peers[0], info.Peers[1]
	if bob.Due || bob.NextAttempt == nil || !bob.NextAttempt.Equal(until) {
		t.Fatalf("bob (breaker open): due %v, next %v; want not due, next %v", bob.Due, bob.NextAttempt, until)
	}
	if e := info.Entries[0]; e.Due || e.NextAttempt == nil || !e.NextAttempt.Equal(until) {
		t.Fatalf("bob's entry: due %v, next %v; want not due, next %v", e.Due, e.NextAttempt, until)
	}
	if !carol.Due || !carol.NextAttempt.Equal(past) || !info.Entries[1].Due || !info.Entries[1].NextAttempt.Equal(past) {
		t.Fatalf("carol (breaker closed) changed: %+v, %+v", carol, info.Entries[1])
	}
}
