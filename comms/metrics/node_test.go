package metrics_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/metrics"
	"github.com/meerkatd/meerkatd/comms/node"
	"github.com/meerkatd/meerkatd/config"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// home makes a node home in a short temporary directory (its socket path
// must fit).
func home(t *testing.T, name string, tune func(*config.Config)) *node.Home {
	t.Helper()
	dir, err := os.MkdirTemp("", "mkx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h, _, err := node.OpenHome(dir, node.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	h.Config.Name = name
	if tune != nil {
		tune(&h.Config)
	}
	return h
}

func trustPeers(t *testing.T, h *node.Home, peers ...trust.Peer) {
	t.Helper()
	l, err := trust.New(peers...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(h.TrustPath()); err != nil {
		t.Fatal(err)
	}
}

func sock(t *testing.T, h *node.Home) transport.Addr {
	t.Helper()
	ls, err := h.Config.Resolve(h.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return ls.UDS
}

func start(t *testing.T, h *node.Home) *node.Node {
	t.Helper()
	n, err := node.Start(h, node.Options{Mode: node.ModeServe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// The counters of a running node's /metrics move with its traffic.
func TestNodeMetricsMoveWithTraffic(t *testing.T) {
	testutil.CheckGoroutines(t)
	carolKey, err := identity.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	ha := home(t, "alice", func(c *config.Config) {
		c.Metrics.Listen = "127.0.0.1:0"
		c.Outbox.Backoff = "1h"
		c.Outbox.BreakerFailures = 1
		c.Outbox.BreakerOpenSecs = 3600
	})
	hb := home(t, "bob", nil)
	trustPeers(t, ha, trust.Peer{Name: "bob", ID: hb.Key.ID(), Addr: sock(t, hb)},
		trust.Peer{Name: "carol", ID: carolKey.ID(), Addr: transport.Addr{Scheme: transport.SchemeUDS, Path: "/nonexistent/carol.sock"}})
	trustPeers(t, hb, trust.Peer{Name: "alice", ID: ha.Key.ID(), Addr: sock(t, ha)})
	alice, bob := start(t, ha), start(t, hb)
	addr := alice.MetricsAddr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	before := metrics.Scrape(t, addr)
	for range 3 {
		if _, err := bob.SendMessage(ctx, "alice", "hello alice", node.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := alice.SendMessage(ctx, "bob", "hello bob", node.SendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := alice.SendMessage(ctx, "carol", "are you there", node.SendOptions{Reliable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.SendMessage(ctx, "carol", "short-lived", node.SendOptions{Reliable: true, TTL: time.Millisecond, NoWait: true}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the short-lived send to die", func() bool {
		dl, _ := alice.DeadLetters(ctx)
		return len(dl) == 1
	})
	// The node tells its agent about carol's breaker and the dead letter
	// with two system items in its inbox.
	testutil.WaitFor(t, 10*time.Second, "the two notices", func() bool {
		st, _ := alice.Status(ctx)
		return st.PendingByClass[node.ClassSystem] == 2
	})
	after := metrics.Scrape(t, addr)
	for _, tc := range []struct {
		name   string
		labels []string
		delta  float64
	}{
		{"meerkatd_envelopes_received_total", nil, 3},
		{"meerkatd_acks_sent_total", nil, 3},
		{"meerkatd_sends_total", []string{"outcome", "acked"}, 2},
		{"meerkatd_sends_total", []string{"outcome", "failed"}, 0},
		{"meerkatd_sends_total", []string{"outcome", "retry"}, 1},
		{"meerkatd_ack_round_trip_seconds", nil, 2},
		{"meerkatd_inbox_items", nil, 3 + 2},
		{"meerkatd_dead_letters", nil, 1},
		{"meerkatd_outbox_queued", []string{"peer", "carol"}, 1},
		{"meerkatd_outbox_breaker", []string{"peer", "carol", "state", "open"}, 1},
	} {
		b, _ := metrics.Value(before, tc.name, tc.labels...)
		a, ok := metrics.Value(after, tc.name, tc.labels...)
		if (!ok && tc.delta != 0) || a-b != tc.delta {
			t.Errorf("%s%v went from %v to %v (present %v), want +%v", tc.name, tc.labels, b, a, ok, tc.delta)
		}
	}
	for _, name := range []string{"meerkatd_inbox_bytes", "meerkatd_db_bytes"} {
		if v, _ := metrics.Value(after, name); v <= 0 {
			t.Errorf("%s = %v after traffic", name, v)
		}
	}
	if v, _ := metrics.Value(after, "meerkatd_inbound_connections", "state", "authenticated"); v < 1 {
		t.Errorf("authenticated inbound connections = %v with bob's link open", v)
	}

	// A read waiting for an item counts while it waits.
	waiting := func() float64 {
		v, ok := metrics.Value(metrics.Scrape(t, addr), "meerkatd_inbox_waiting_reads")
		if !ok {
			t.Fatal("no meerkatd_inbox_waiting_reads")
		}
		return v
	}
	if v := waiting(); v != 0 {
		t.Fatalf("waiting reads = %v with none waiting", v)
	}
	all, err := alice.Receive(ctx, node.Query{Order: node.OrderArrival, Peek: true})
	if err != nil || all.More {
		t.Fatalf("reading every item: more %v, %v", all.More, err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	// A peek (an MCP server watching for arrivals) is no read waiting.
	pctx, pcancel := context.WithCancel(ctx)
	peeked := make(chan error, 1)
	go func() {
		_, err := alice.Receive(pctx, node.Query{After: all.Cursor, Wait: node.MaxWait, Peek: true})
		peeked <- err
	}()
	go func() { // past every item: it waits for the next
		_, err := alice.Receive(wctx, node.Query{After: all.Cursor, Wait: node.MaxWait})
		done <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "the read to wait", func() bool { return waiting() == 1 })
	wcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiting read ended with %v, want its cancellation", err)
	}
	if v := waiting(); v != 0 {
		t.Fatalf("waiting reads = %v after the read ended, with only a peek waiting", v)
	}
	pcancel()
	if err := <-peeked; !errors.Is(err, context.Canceled) {
		t.Fatalf("the peek ended with %v", err)
	}
}
