package node

import (
	"context"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
)

// The daemon's outbox bounds stored expiries by outbox.DefaultMaxTTL (the
// node does not set Options.MaxTTL): every time-to-live a send may ask
// for, or the configuration may give, must fit in it.
func TestOutboxMaxTTLCoversSends(t *testing.T) {
	if MaxTTL > outbox.DefaultMaxTTL {
		t.Errorf("MaxTTL %s is longer than outbox.DefaultMaxTTL %s: stored expiries would be cut short", MaxTTL, outbox.DefaultMaxTTL)
	}
	if d := time.Duration(config.MaxTimeoutSecs) * time.Second; d > outbox.DefaultMaxTTL {
		t.Errorf("outbox.default_ttl_secs may be %s, longer than outbox.DefaultMaxTTL %s", d, outbox.DefaultMaxTTL)
	}
}

// Without a daemon, the stored outbox is shown as the daemon will treat
// it: an entry and a breaker stored while the clock was five years ahead
// show a next attempt, an expiry and an open time within the outbox's
// bounds, not years away.
func TestOutboxViewBoundsFarAhead(t *testing.T) {
	h, bob := testHome(t, "alice", func(c *config.Config) {
		c.Outbox.Backoff = "0s, 1m"
		c.Outbox.BreakerOpenSecs = 120
	})
	ctx := context.Background()
	n := startTest(t, h, ModeSend)
	st, err := n.outboxStore()
	if err != nil {
		t.Fatal(err)
	}
	far := time.Now().AddDate(5, 0, 0)
	if _, err := st.Add(outbox.Entry{ID: identity.NewUUID(), To: bob.ID(), Peer: "bob", Kind: "message", Payload: []byte("x"),
		Created: far, Expires: far, Attempts: 3, NextAttempt: far, LastError: "refused"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveBreaker(outbox.Breaker{Peer: bob.ID(), Failures: 3, OpenUntil: far}); err != nil {
		t.Fatal(err)
	}
	b := n.outboxBounds()
	if b.Open != 2*time.Minute || b.Wait < time.Minute || b.TTL != outbox.DefaultMaxTTL {
		t.Fatalf("bounds %+v, want the configured schedule's", b)
	}
	o, err := n.Outbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if len(o.Peers) != 1 || len(o.Entries) != 1 {
		t.Fatalf("outbox %+v", o)
	}
	p, e := o.Peers[0], o.Entries[0]
	if p.Breaker != outbox.BreakerOpen || p.OpenUntil == nil || p.OpenUntil.After(after.Add(b.Open)) {
		t.Errorf("peer breaker %s until %v; want open until %v at most", p.Breaker, p.OpenUntil, after.Add(b.Open))
	}
	hold := max(b.Wait, b.Open) // an open breaker holds the entry until its probe
	if p.NextAttempt == nil || p.NextAttempt.After(after.Add(hold)) || e.NextAttempt == nil || e.NextAttempt.After(after.Add(hold)) {
		t.Errorf("next attempt: peer %v, entry %v; want %v at most", p.NextAttempt, e.NextAttempt, after.Add(hold))
	}
	if e.Expires == nil || e.Expires.After(after.Add(b.TTL)) {
		t.Errorf("expires %v; want %v at most", e.Expires, after.Add(b.TTL))
	}
}

// A reliable send without a daemon waits behind a stored open breaker
// only as long as the daemon would: one stored five years ahead says it
// is open until at most the breaker's open period from now.
func TestQueuedForBoundsFarBreaker(t *testing.T) {
	st := outbox.NewMemStore()
	kp, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	peer := kp.ID()
	now := time.Now()
	if err := st.SaveBreaker(outbox.Breaker{Peer: peer, Failures: 3, OpenUntil: now.AddDate(5, 0, 0)}); err != nil {
		t.Fatal(err)
	}
	bounds := outbox.Options{BreakerOpen: 2 * time.Minute}.Bounds()
	got, err := queuedFor(st, peer, now, bounds)
	if err != nil {
		t.Fatal(err)
	}
	want := "the peer's circuit breaker is open until " + now.Add(2*time.Minute).Local().Format(time.RFC3339)
	if got != want {
		t.Errorf("queuedFor = %q, want %q", got, want)
	}
}

// Without a daemon, an entry whose time-to-live ran out shows as
// expired, not as due: nothing will attempt it again.
func TestOutboxViewShowsExpired(t *testing.T) {
	h, bob := testHome(t, "alice", nil)
	n := startTest(t, h, ModeSend)
	st, err := n.outboxStore()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, exp := range []time.Time{now.Add(-time.Minute), now.Add(time.Hour), {}} {
		if _, err := st.Add(outbox.Entry{ID: identity.NewUUID(), To: bob.ID(), Peer: "bob", Kind: "message", Payload: []byte{byte(i)},
			Created: now.Add(-2 * time.Minute), Expires: exp}); err != nil {
			t.Fatal(err)
		}
	}
	o, err := n.Outbox(context.Background())
	if err != nil || len(o.Entries) != 3 {
		t.Fatalf("outbox %+v, %v", o, err)
	}
	for i, want := range []bool{true, false, false} {
		if e := o.Entries[i]; e.Expired != want || e.Due == want {
			t.Errorf("entry %d (expires %v): expired %v, due %v; want expired %v", i, e.Expires, e.Expired, e.Due, want)
		}
	}
	// The peer's row takes its next attempt from the first entry alive.
	if len(o.Peers) != 1 || o.Peers[0].Queued != 3 || !o.Peers[0].Due {
		t.Errorf("peer row %+v: want 3 queued, due (its second entry)", o.Peers)
	}
	// A peer whose only entry expired has nothing due.
	h2, carol := testHome(t, "dave", nil)
	n2 := startTest(t, h2, ModeSend)
	st2, err := n2.outboxStore()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st2.Add(outbox.Entry{ID: identity.NewUUID(), To: carol.ID(), Peer: "carol", Kind: "message", Payload: []byte{1},
		Created: now.Add(-2 * time.Minute), Expires: now.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if o, err = n2.Outbox(context.Background()); err != nil || len(o.Peers) != 1 || o.Peers[0].Due || o.Peers[0].NextAttempt != nil {
		t.Errorf("peer row with only an expired entry: %+v, %v; want nothing due", o.Peers, err)
	}
}

// After a restart, a peer whose breaker is open with nothing queued is
// listed by its trust-list name (the outbox learns names from what it
// queues), and one whose breaker is closed is not listed.
func TestOutboxPeersNamedAfterRestart(t *testing.T) {
	h, bob := testHome(t, "alice", nil)
	carol, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	cmd := startTest(t, h, ModeSend)
	st, err := cmd.outboxStore()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SaveBreaker(outbox.Breaker{Peer: bob.ID(), Failures: 5, OpenUntil: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveBreaker(outbox.Breaker{Peer: carol.ID(), Failures: 1}); err != nil {
		t.Fatal(err)
	}
	cmd.Close()
	for _, mode := range []Mode{ModeSend, ModeServe} {
		n := startTest(t, h, mode)
		o, err := n.Outbox(context.Background())
		if err != nil || len(o.Peers) != 1 || o.Peers[0].Peer != "bob" || o.Peers[0].Breaker != outbox.BreakerOpen {
			t.Fatalf("mode %d: peers %+v, %v; want bob alone, by name, breaker open", mode, o.Peers, err)
		}
		n.Close()
	}
}

// holdQueues: an entry behind one waiting out its backoff takes its time,
// one behind an attempt under way is not due, nor is its peer; expired
// entries and those a broker holds hold nothing back.
func TestHoldBehind(t *testing.T) {
	later := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	info := Outbox{
		Entries: []QueuedSend{
			{PubKey: "a", Due: false, NextAttempt: &later}, // backing off
			{PubKey: "a", Due: true},                       // behind it
			{PubKey: "b", InFlight: true},                  // under way
			{PubKey: "b", Due: true},                       // behind it
			{PubKey: "c", Expired: true},                   // never attempted again
			{PubKey: "c", StoredInBroker: true, Due: false, NextAttempt: &later},
			{PubKey: "c", Due: true}, // the first that holds c's queue
		},
		Peers: []PeerSendState{{PubKey: "a"}, {PubKey: "b", Due: true}, {PubKey: "c", Due: true}},
	}
	holdQueues(&info)
	e := info.Entries
	if e[1].Due || e[1].NextAttempt == nil || !e[1].NextAttempt.Equal(later) {
		t.Errorf("behind a backoff: %+v", e[1])
	}
	if e[3].Due || info.Peers[1].Due {
		t.Errorf("behind an attempt under way: entry %+v, peer %+v", e[3], info.Peers[1])
	}
	if !e[6].Due || !info.Peers[2].Due {
		t.Errorf("behind an expired entry and a stored one: entry %+v, peer %+v", e[6], info.Peers[2])
	}
}
