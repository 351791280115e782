package mcpserver

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meerkatd/meerkatd/comms/node"
)

// coalesceTimers is the coalescer's clock in tests: each timer fires only when
// the test says so.
type coalesceTimers struct {
	mu     sync.Mutex
	timers []chan time.Time
	asked  []time.Duration
}

func (f *coalesceTimers) after(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := make(chan time.Time, 1)
	f.timers = append(f.timers, c)
	f.asked = append(f.asked, d)
	return c
}

// fire waits for the i-th timer to be started and fires it.
func (f *coalesceTimers) fire(t *testing.T, i int) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.timers) > i
	})
	f.mu.Lock()
	c := f.timers[i]
	f.mu.Unlock()
	c <- time.Time{}
}

func (f *coalesceTimers) started() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// startCoalescing starts a legacy client, subscribed to meerkat://inbox,
// of a server over f that notifies at most once per interval on timers.
func startCoalescing(t *testing.T, f *fakeNode, interval time.Duration, timers *coalesceTimers) (*notes, *client.Client) {
	t.Helper()
	s := New(f, Options{NotifyInterval: interval})
	s.notifyAfter = timers.after
	c, err := client.NewInProcessClient(s.MCP())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &notes{}
	c.OnNotification(n.add)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = legacyEra
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	var sub mcp.SubscribeRequest
	sub.Params.URI = InboxURI
	//lint:ignore SA1019 clients of the 2025-11-25 revision subscribe this way
	if err := c.Subscribe(ctx, sub); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.WatchArrivals(ctx)
	}()
	f.waitWatcher(t, 0)
	t.Cleanup(func() {
		cancel()
		<-done
		c.Close()
	})
	return n, c
}

func coalescedData(x mcp.JSONRPCNotification) map[string]any {
	data, _ := x.Params.AdditionalFields["data"].(map[string]any)
	return data
}

// With an interval, the first arrival is announced at once; those during
// the interval are held and announced together, once, when it ends (the
// latest described, all counted); an interval with nothing new sends
// nothing; the next arrival after a quiet interval is announced at once.
func TestNotificationsCoalesced(t *testing.T) {
	f := newFakeNode()
	timers := &coalesceTimers{}
	const interval = 750 * time.Millisecond
	n, _ := startCoalescing(t, f, interval, timers)

	from := n.mark()
	f.deliver(node.Message{ID: "a1", Kind: "message", Peer: "bob"})
	ev := n.wait(t, from, logged, nil)
	if d := coalescedData(ev); d["id"] != "a1" || fmt.Sprint(d["arrivals"]) != "1" {
		t.Fatalf("first arrival: %v", d)
	}
	n.wait(t, from, updated, nil)

	// Five more while the interval runs: the watcher reads them all, and
	// nothing is sent until its timer fires.
	for i := 2; i <= 6; i++ {
		f.deliver(node.Message{ID: fmt.Sprintf("a%d", i), Kind: "request", Peer: "bob"})
		f.waitWatcher(t, uint64(i))
	}
	if got := len(n.since(from, logged)) + len(n.since(from, updated)); got != 2 {
		t.Fatalf("%d notifications during the interval, want only the first arrival's 2", got)
	}
	mid := n.mark()
	timers.fire(t, 0)
	ev = n.wait(t, mid, logged, nil)
	if d := coalescedData(ev); d["id"] != "a6" || fmt.Sprint(d["arrivals"]) != "5" || d["kind"] != "request" || fmt.Sprint(d["pending"]) != "6" {
		t.Fatalf("coalesced event: %v", d)
	}
	n.wait(t, mid, updated, nil)

	// The second interval passes with nothing new: no notification. Then
	// an arrival is announced at once, alone.
	timers.fire(t, 1)
	quiet := n.mark()
	f.deliver(node.Message{ID: "a7", Kind: "message", Peer: "bob"})
	ev = n.wait(t, quiet, logged, nil)
	if d := coalescedData(ev); d["id"] != "a7" || fmt.Sprint(d["arrivals"]) != "1" {
		t.Fatalf("after a quiet interval: %v", d)
	}
	n.wait(t, quiet, updated, nil)
	if got := len(n.since(quiet, logged)); got != 1 {
		t.Fatalf("%d log events after the quiet interval, want 1", got)
	}
	timers.mu.Lock()
	asked := append([]time.Duration(nil), timers.asked...)
	timers.mu.Unlock()
	for _, d := range asked {
		if d != interval {
			t.Fatalf("timer of %v, want the interval %v", d, interval)
		}
	}
}

// Without an interval every arrival is announced by itself, and no timer
// is used.
func TestNotificationsEveryArrival(t *testing.T) {
	f := newFakeNode()
	timers := &coalesceTimers{}
	n, _ := startCoalescing(t, f, 0, timers)
	from := n.mark()
	for i := 1; i <= 3; i++ {
		f.deliver(node.Message{ID: fmt.Sprintf("e%d", i), Kind: "message", Peer: "bob"})
		f.waitWatcher(t, uint64(i))
	}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("e%d", i)
		ev := n.wait(t, from, logged, func(x mcp.JSONRPCNotification) bool { return coalescedData(x)["id"] == id })
		if _, ok := coalescedData(ev)["arrivals"]; ok {
			t.Fatalf("an uncoalesced event counts arrivals: %v", coalescedData(ev))
		}
	}
	if timers.started() != 0 {
		t.Fatal("a timer was started with no interval")
	}
}

// Arrival events are log events at level info: a client that asked for
// warnings and above (logging/setLevel) gets none, until it asks for info
// again.
func TestArrivalEventsFollowTheLogLevel(t *testing.T) {
	f := newFakeNode()
	n, c := startCoalescing(t, f, 0, &coalesceTimers{})
	setLevel := func(level mcp.LoggingLevel) {
		t.Helper()
		var req mcp.SetLevelRequest
		req.Params.Level = level
		//lint:ignore SA1019 clients of the 2025-11-25 revision set the level this way
		if err := c.SetLevel(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	from := n.mark()
	setLevel(mcp.LoggingLevelWarning)
	f.deliver(node.Message{ID: "quiet", Kind: "message", Peer: "bob"})
	f.waitWatcher(t, 1)
	setLevel(mcp.LoggingLevelDebug)
	f.deliver(node.Message{ID: "heard", Kind: "message", Peer: "bob"})
	n.wait(t, from, logged, func(x mcp.JSONRPCNotification) bool { return coalescedData(x)["id"] == "heard" })
	for _, x := range n.since(from, logged) {
		if coalescedData(x)["id"] == "quiet" {
			t.Fatalf("an arrival announced at level info to a client that asked for warnings: %v", coalescedData(x))
		}
	}
}
