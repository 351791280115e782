package outbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// receiver is a fake peer side: it stores envelopes in the order they are
// queued (as one pipelined connection would), recognising repeats.
type receiver struct {
	mu     sync.Mutex
	down   bool // refuse every attempt before storing
	loseAt int  // if > 0, every loseAt-th attempt is stored but its ack is lost
	perm   error
	calls  int
	stored map[identity.UUID]int // times each id arrived
	order  []identity.UUID       // first arrival order
	block  chan struct{}         // if set, acks wait for it
}

func newReceiver() *receiver { return &receiver{stored: map[identity.UUID]int{}} }

func (r *receiver) setDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

func (r *receiver) Deliver(ctx context.Context, a Attempt) error {
	r.mu.Lock()
	r.calls++
	n, down, perm, block := r.calls, r.down, r.perm, r.block
	if perm != nil {
		r.mu.Unlock()
		return perm
	}
	if down {
		r.mu.Unlock()
		return errors.New("connection refused")
	}
	if r.stored[a.ID] == 0 {
		r.order = append(r.order, a.ID)
	}
	r.stored[a.ID]++
	r.mu.Unlock()
	a.Queued()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if r.loseAt > 0 && n%r.loseAt == 0 {
		return errors.New("connection closed before the ack")
	}
	return nil
}

func (r *receiver) snapshot() (order []identity.UUID, stored map[identity.UUID]int, calls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order), maps(r.stored), r.calls
}

func maps(m map[identity.UUID]int) map[identity.UUID]int {
	out := make(map[identity.UUID]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

var peerA, peerB = mustPeer(1), mustPeer(2)

func mustPeer(b byte) identity.PeerID {
	var raw [32]byte
	raw[0] = b
	id, err := identity.PeerIDFromBytes(raw[:])
	if err != nil {
		panic(err)
	}
	return id
}

func entry(to identity.PeerID, i int) Entry {
	return Entry{ID: identity.NewUUID(), To: to, Peer: fmt.Sprintf("peer-%x", to[0]), Kind: "message", Payload: []byte(fmt.Sprintf("payload %d", i))}
}

// fastOpts retries at once and never opens the breaker on its own.
func fastOpts() Options {
	return Options{Backoff: []time.Duration{time.Millisecond}, BreakerFailures: 1 << 30, MaxAttempts: 1 << 30}
}

func waitTickets(t *testing.T, ts []*Ticket) {
	t.Helper()
	for i, tk := range ts {
		select {
		case <-tk.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("ticket %d not done", i)
		}
	}
}

func TestDeliversInOrderPipelined(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	ob, err := New(st, rcv, Options{Window: 16})
	if err != nil {
		t.Fatal(err)
	}
	ob.Start()
	want, ts := enqueueN(t, ob, peerA, 500)
	waitTickets(t, ts)
	ob.Close()
	order, stored, _ := rcv.snapshot()
	if !slices.Equal(order, want) {
		t.Fatalf("arrival order differs from send order")
	}
	for id, n := range stored {
		if n != 1 {
			t.Errorf("%s arrived %d times", id, n)
		}
	}
	for _, tk := range ts {
		if tk.Err() != nil {
			t.Fatalf("ticket error %v", tk.Err())
		}
	}
	if es, _ := st.Entries(); len(es) != 0 {
		t.Fatalf("%d entries left in the store after every ack", len(es))
	}
}

func TestRetriesUntilPeerReturnsInOrder(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	rcv.setDown(true)
	rcv.loseAt = 7 // some acks are lost after the peer stored the envelope
	var mu sync.Mutex
	events := map[string]int{}
	opts := fastOpts()
	opts.Observe = func(ev Event) { mu.Lock(); events[ev.Type]++; mu.Unlock() }
	ob, err := New(st, rcv, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	want, ts := enqueueN(t, ob, peerA, 200)
	testutil.WaitFor(t, 10*time.Second, "several failed attempts", func() bool { _, _, calls := rcv.snapshot(); return calls >= 5 })
	if s := ob.Peer(peerA); s.Queued != 200 || s.LastError == "" {
		t.Fatalf("peer state while down: %+v", s)
	}
	rcv.setDown(false)
	waitTickets(t, ts)
	order, stored, _ := rcv.snapshot()
	if !slices.Equal(order, want) {
		t.Fatalf("first arrivals are not in send order")
	}
	if len(stored) != 200 {
		t.Fatalf("%d distinct envelopes arrived, want 200", len(stored))
	}
	mu.Lock()
	defer mu.Unlock()
	if events[EventRetry] == 0 || events[EventAcked] != 200 {
		t.Fatalf("events %v", events)
	}
}

func TestBreakerOpensQueuesThenProbes(t *testing.T) {
	testutil.CheckGoroutines(t)
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	st, rcv := NewMemStore(), newReceiver()
	rcv.setDown(true)
	var evMu sync.Mutex
	var events []BreakerEvent
	opts := Options{Backoff: []time.Duration{0}, BreakerFailures: 3, BreakerOpen: time.Hour, Now: now,
		OnBreaker: func(ev BreakerEvent) { evMu.Lock(); events = append(events, ev); evMu.Unlock() }}
	ob, err := New(st, rcv, opts)
	if err != nil {
		t.Fatal(err)
	}
	parked := signalParked(ob)
	ob.Start()
	_, ts := enqueueN(t, ob, peerA, 3)
	testutil.WaitFor(t, 10*time.Second, "the breaker to open", func() bool { return ob.Peer(peerA).Breaker == BreakerOpen })
	_, _, calls := rcv.snapshot()
	if calls < 3 {
		t.Fatalf("breaker open after %d attempts, want at least 3 failed rounds", calls)
	}
	bs, _ := st.Breakers()
	if len(bs) != 1 || bs[0].Failures != 3 || !bs[0].OpenUntil.Equal(now().Add(time.Hour)) {
		t.Fatalf("stored breaker %+v", bs)
	}
	// A restarted outbox over the same store still sees it open.
	ob2, err := New(st, rcv, opts)
	if err != nil {
		t.Fatal(err)
	}
	if s := ob2.Peer(peerA); s.Breaker != BreakerOpen || s.Queued != 3 {
		t.Fatalf("reloaded state %+v", s)
	}
	ob2.Close()

	// While open, new sends queue and nothing is dialled.
	_, tk, err := ob.Enqueue(entry(peerA, 3))
	if err != nil {
		t.Fatal(err)
	}
	ts = append(ts, tk)
	clock.Add(int64(30 * time.Minute))
	for len(parked) > 0 {
		<-parked
	}
	wake(ob.peers[peerA])
	<-parked // the worker looked and went back to waiting
	if _, _, c := rcv.snapshot(); c != calls {
		t.Fatalf("%d attempts while the breaker was open", c-calls)
	}
	// After the open time, exactly one probe; it fails, so it opens again.
	clock.Add(int64(31 * time.Minute))
	wake(ob.peers[peerA])
	testutil.WaitFor(t, 10*time.Second, "the probe", func() bool { _, _, c := rcv.snapshot(); return c == calls+1 })
	testutil.WaitFor(t, 10*time.Second, "the breaker to reopen", func() bool { return ob.Peer(peerA).Breaker == BreakerOpen })
	if _, _, c := rcv.snapshot(); c != calls+1 {
		t.Fatalf("half-open sent %d attempts, want 1 probe", c-calls)
	}
	// The peer is back; the next probe succeeds and closes it.
	rcv.setDown(false)
	clock.Add(int64(2 * time.Hour))
	wake(ob.peers[peerA])
	waitTickets(t, ts)
	if s := ob.Peer(peerA); s.Breaker != BreakerClosed || s.Failures != 0 || s.Queued != 0 {
		t.Fatalf("after recovery %+v", s)
	}
	if bs, _ := st.Breakers(); len(bs) != 0 {
		t.Fatalf("closed breaker still stored: %+v", bs)
	}
	ob.Close()

	// Every transition was reported once, in order: open, probe, open
	// again, probe, closed with the three envelopes still waiting.
	evMu.Lock()
	defer evMu.Unlock()
	type brief struct {
		State             string
		Failures, Waiting int
		WasOpen           bool
	}
	var got []brief
	for _, ev := range events {
		if ev.Peer != peerA || ev.Name != "peer-1" {
			t.Errorf("event about %v %q", ev.Peer, ev.Name)
		}
		if (ev.State == BreakerOpen) == ev.Until.IsZero() {
			t.Errorf("%s event with until %v", ev.State, ev.Until)
		}
		got = append(got, brief{ev.State, ev.Failures, ev.Waiting, ev.WasOpen})
	}
	want := []brief{{BreakerOpen, 3, 3, false}, {BreakerHalfOpen, 3, 4, false}, {BreakerOpen, 4, 4, false},
		{BreakerHalfOpen, 4, 4, false}, {BreakerClosed, 4, 3, true}}
	if len(got) > 0 && got[0].Waiting >= 1 && got[0].Waiting <= 3 {
		want[0].Waiting = got[0].Waiting // the first open may come while the three are being enqueued
	}
	if !slices.Equal(got, want) {
		t.Errorf("breaker events\n%+v\nwant\n%+v", got, want)
	}
}

// The probe of a half-open breaker goes once the breaker's open time is
// over, not when the oldest envelope's backoff (grown longer meanwhile)
// would have let it.
func TestProbeDoesNotWaitForBackoff(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := clock.now
	st, rcv := NewMemStore(), newReceiver()
	rcv.setDown(true)
	opts := Options{Backoff: []time.Duration{0, 0, 5 * time.Hour}, BreakerFailures: 3, BreakerOpen: time.Hour, Now: now}
	ob, err := New(st, rcv, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	if _, _, err := ob.Enqueue(entry(peerA, 0)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the breaker to open", func() bool { return ob.Peer(peerA).Breaker == BreakerOpen })
	_, _, calls := rcv.snapshot()
	if es, _ := st.Entries(); len(es) != 1 || !es[0].NextAttempt.After(now().Add(2*time.Hour)) {
		t.Fatalf("the envelope's next attempt: %+v, want its 5h backoff", es)
	}
	clock.add(61 * time.Minute) // past the open time, long before the backoff
	wake(ob.peers[peerA])
	testutil.WaitFor(t, 10*time.Second, "the probe", func() bool { _, _, c := rcv.snapshot(); return c == calls+1 })
}

// A half-open breaker's probe whose peer's host name no longer resolves
// waits for the resolve schedule before the next one: not a probe again
// at once, over and over, until every envelope ran out of attempts.
func TestProbeThatDoesNotResolveWaits(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := clock.now
	var calls atomic.Int32
	var dns atomic.Bool
	d := deliverFunc(func(ctx context.Context, a Attempt) error {
		calls.Add(1)
		if dns.Load() {
			return fmt.Errorf("dial: %w", &net.DNSError{Err: "no such host", Name: "gone.invalid", IsNotFound: true})
		}
		return errors.New("connection refused")
	})
	ob, err := New(NewMemStore(), d, Options{Backoff: []time.Duration{time.Minute}, ResolveBackoff: []time.Duration{7 * time.Minute},
		BreakerFailures: 1, BreakerOpen: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	parked := signalParked(ob)
	ob.Start()
	for i := range 3 {
		if _, _, err := ob.Enqueue(entry(peerA, i)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the breaker to open", func() bool { return ob.Peer(peerA).Breaker == BreakerOpen })
	dns.Store(true)
	c0 := calls.Load()
	clock.add(61 * time.Minute) // the probe is due; the clock then stands still
	for len(parked) > 0 {
		<-parked
	}
	wake(ob.peers[peerA])
	testutil.WaitFor(t, 10*time.Second, "the probe", func() bool { return calls.Load() > c0 })
	for range 3 { // the worker looks again and again: no attempt is due
		select {
		case <-parked:
		case <-time.After(10 * time.Second):
			t.Fatal("the worker did not go back to waiting")
		}
		wake(ob.peers[peerA])
	}
	if n := calls.Load() - c0; n != 1 {
		t.Fatalf("%d attempts with the clock standing after the probe, want the probe alone", n)
	}
	if dl, _ := ob.DeadLetters(); len(dl) != 0 {
		t.Fatalf("dead letters: %+v", dl)
	}
}

// signalParked makes ob's worker signal on the channel returned each
// time it goes back to waiting (at most 100 unread). Call it before Start.
func signalParked(ob *Outbox) chan struct{} {
	parked := make(chan struct{}, 100)
	ob.parked = func(identity.PeerID) {
		select {
		case parked <- struct{}{}:
		default:
		}
	}
	return parked
}

// downOutbox starts an outbox with opts whose receiver is down, on a
// memory store, closed at the test's end.
func downOutbox(t *testing.T, opts Options) (*Outbox, *receiver) {
	t.Helper()
	testutil.CheckGoroutines(t)
	rcv := newReceiver()
	rcv.setDown(true)
	ob, err := New(NewMemStore(), rcv, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ob.Close)
	ob.Start()
	return ob, rcv
}

func TestKickEndsTheWait(t *testing.T) {
	ob, rcv := downOutbox(t, Options{Backoff: []time.Duration{time.Hour}, BreakerFailures: 1, BreakerOpen: time.Hour})
	_, tk, err := ob.Enqueue(entry(peerA, 0))
	if err != nil {
		t.Fatal(err)
	}
	<-tk.Attempted()
	testutil.WaitFor(t, 10*time.Second, "the breaker to open", func() bool { return ob.Peer(peerA).Breaker == BreakerOpen })
	rcv.setDown(false)
	ob.Kick(peerA)
	waitTickets(t, []*Ticket{tk})
	if tk.Err() != nil {
		t.Fatal(tk.Err())
	}
}

// A peer that comes back with nothing queued for it leaves its open
// breaker half-open: the next send to it is the probe, not held back by
// failures from before.
func TestKickWithNothingQueued(t *testing.T) {
	ob, rcv := downOutbox(t, Options{Backoff: []time.Duration{time.Hour}, BreakerFailures: 1, BreakerOpen: time.Hour, MaxAttempts: 1})
	_, tk, err := ob.Enqueue(entry(peerA, 0))
	if err != nil {
		t.Fatal(err)
	}
	waitTickets(t, []*Ticket{tk})
	if tk.Err() == nil {
		t.Fatal("the only attempt allowed was acknowledged; want a dead letter")
	}
	if p := ob.Peer(peerA); p.Breaker != BreakerOpen || p.Queued != 0 {
		t.Fatalf("peer after its dead letter: %+v, want the breaker open, nothing queued", p)
	}
	ob.Kick(peerA)
	if p := ob.Peer(peerA); p.Breaker != BreakerHalfOpen {
		t.Fatalf("peer after it came back: %+v, want the breaker half-open", p)
	}
	rcv.setDown(false)
	_, tk, err = ob.Enqueue(entry(peerA, 1))
	if err != nil {
		t.Fatal(err)
	}
	waitTickets(t, []*Ticket{tk})
	if tk.Err() != nil {
		t.Fatalf("the send after the peer came back: %v", tk.Err())
	}
}

// An open breaker's probes made before the envelope's own next attempt
// do not count against its attempts: a peer down for long runs its
// envelopes out of attempts on their own backoff, not one per probe.
func TestProbesDoNotSpendAttempts(t *testing.T) {
	ob, rcv := downOutbox(t, Options{Backoff: []time.Duration{time.Hour}, BreakerFailures: 1, BreakerOpen: 20 * time.Millisecond, MaxAttempts: 2})
	e, tk, err := ob.Enqueue(entry(peerA, 0))
	if err != nil {
		t.Fatal(err)
	}
	<-tk.Attempted()
	testutil.WaitFor(t, 10*time.Second, "five probes after the first attempt", func() bool {
		_, _, calls := rcv.snapshot()
		return calls >= 6
	})
	q := ob.List()
	if len(q) != 1 || q[0].ID != e.ID || q[0].Attempts != 1 || q[0].NextAttempt.Sub(time.Now()) < 50*time.Minute {
		t.Fatalf("after the probes: %+v; want it queued, one attempt counted, its next attempt still an hour off", q)
	}
	select {
	case <-tk.Done():
		t.Fatalf("the probes ran it out of attempts: %v", tk.Err())
	default:
	}
}

// DropQueued takes queued envelopes out into the dead letters (dropped),
// and what waited behind one goes; an id not queued is left, reported.
func TestDropQueued(t *testing.T) {
	ob, rcv := downOutbox(t, Options{Backoff: []time.Duration{time.Hour}, BreakerFailures: 100, BreakerOpen: time.Hour})
	stuck, tk1, err := ob.Enqueue(entry(peerA, 0))
	if err != nil {
		t.Fatal(err)
	}
	<-tk1.Attempted()
	testutil.WaitFor(t, 10*time.Second, "the first attempt to end", func() bool { return ob.Peer(peerA).Failures == 1 })
	rcv.setDown(false)
	behind, tk2, err := ob.Enqueue(entry(peerA, 1))
	if err != nil {
		t.Fatal(err)
	}
	nobody := identity.NewUUID()
	if did := ob.DropQueued(stuck.ID, nobody); len(did) != 1 || did[stuck.ID] != Dropped {
		t.Fatalf("DropQueued: %v, want only %v dropped", did, stuck.ID)
	}
	waitTickets(t, []*Ticket{tk1, tk2})
	if tk1.Err() == nil {
		t.Fatalf("the dropped envelope's ticket: %v, want it dead", tk1.Err())
	}
	if tk2.Err() != nil {
		t.Fatalf("the envelope behind it: %v, want it delivered once the first was dropped", tk2.Err())
	}
	dl, err := ob.DeadLetters()
	if err != nil || len(dl) != 1 || dl[0].ID != stuck.ID || dl[0].Reason != ReasonDropped {
		t.Fatalf("dead letters %+v, %v: want the dropped one, reason %s", dl, err, ReasonDropped)
	}
	if d := ob.DropQueued(behind.ID); len(d) != 0 {
		t.Fatal("dropped an envelope already delivered")
	}
}

func TestDeadLetters(t *testing.T) {
	testutil.CheckGoroutines(t)
	cases := []struct {
		name   string
		setup  func(*receiver, *Options, *Entry)
		event  string
		reason string
	}{
		{"expired", func(r *receiver, o *Options, e *Entry) {
			r.down = true
			e.Expires = time.Now().Add(20 * time.Millisecond)
		}, EventExpired, ReasonExpired},
		{"already expired", func(r *receiver, o *Options, e *Entry) {
			e.Expires = time.Now().Add(-time.Second)
		}, EventExpired, ReasonExpired},
		{"exhausted", func(r *receiver, o *Options, e *Entry) {
			r.down = true
			o.MaxAttempts = 3
		}, EventDeadLetter, ReasonExhausted},
		{"permanent", func(r *receiver, o *Options, e *Entry) {
			r.perm = Permanent(ReasonUnknownPeer, errors.New("not trusted"))
		}, EventDeadLetter, ReasonUnknownPeer},
		{"rejected", func(r *receiver, o *Options, e *Entry) {
			r.perm = Permanent(ReasonRejected, errors.New("too large for the peer"))
		}, EventDeadLetter, ReasonRejected},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, rcv := NewMemStore(), newReceiver()
			opts := fastOpts()
			var got []Event
			var mu sync.Mutex
			opts.Observe = func(ev Event) { mu.Lock(); got = append(got, ev); mu.Unlock() }
			e := entry(peerA, 0)
			c.setup(rcv, &opts, &e)
			ob, err := New(st, rcv, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer ob.Close()
			ob.Start()
			e, tk, err := ob.Enqueue(e)
			if err != nil {
				t.Fatal(err)
			}
			waitTickets(t, []*Ticket{tk})
			var de *DeadError
			if !errors.As(tk.Err(), &de) || !hasPrefix(de.Reason, c.reason) {
				t.Fatalf("ticket error %v, want a dead letter %q", tk.Err(), c.reason)
			}
			dl, _ := st.DeadLetters()
			if len(dl) != 1 || dl[0].ID != e.ID || !hasPrefix(dl[0].Reason, c.reason) {
				t.Fatalf("dead letters %+v", dl)
			}
			if c.name == "exhausted" && dl[0].Attempts != 3 {
				t.Fatalf("a dead letter after 3 failed attempts records %d", dl[0].Attempts)
			}
			// A peer no longer trusted is refused here: nothing went out.
			// A refusal by the peer was an attempt.
			if want := map[string]int{"permanent": 0, "rejected": 1}; (c.name == "permanent" || c.name == "rejected") && dl[0].Attempts != want[c.name] {
				t.Fatalf("%s: the dead letter records %d attempts, want %d", c.name, dl[0].Attempts, want[c.name])
			}
			if ob.Len() != 0 {
				t.Fatalf("still queued: %d", ob.Len())
			}
			mu.Lock()
			last := got[len(got)-1]
			mu.Unlock()
			if last.Type != c.event || last.Entry.ID != e.ID {
				t.Fatalf("last event %+v, want %s", last, c.event)
			}
			// Revived, it is delivered once the peer accepts.
			rcv.mu.Lock()
			rcv.down, rcv.perm = false, nil
			rcv.mu.Unlock()
			if n, err := ob.Revive(e.ID); n != 1 || err != nil {
				t.Fatalf("revive: %d, %v", n, err)
			}
			testutil.WaitFor(t, 10*time.Second, "the revived envelope", func() bool { _, s, _ := rcv.snapshot(); return s[e.ID] > 0 && ob.Len() == 0 })
			if dl, _ := st.DeadLetters(); len(dl) != 0 {
				t.Fatalf("dead letters after revive: %+v", dl)
			}
		})
	}
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

func TestRestartDeliversStoredEntries(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	rcv.setDown(true)
	ob, err := New(st, rcv, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	ob.Start()
	want, _ := enqueueN(t, ob, peerA, 50)
	ob.Close() // with everything still queued
	if es, _ := st.Entries(); len(es) != 50 {
		t.Fatalf("%d entries stored after close, want 50", len(es))
	}
	rcv.setDown(false)
	ob2, err := New(st, rcv, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	ob2.Start()
	testutil.WaitFor(t, 10*time.Second, "the stored entries to go out", func() bool { return ob2.Len() == 0 })
	ob2.Close()
	order, _, _ := rcv.snapshot()
	if !slices.Equal(order, want) {
		t.Fatalf("after restart: order differs")
	}
	if es, _ := st.Entries(); len(es) != 0 {
		t.Fatalf("%d entries left", len(es))
	}
}

func TestCloseWithAttemptsInFlight(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	rcv.block = make(chan struct{}) // acks never come
	ob, err := New(st, rcv, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	ob.Start()
	for i := range 10 {
		if _, _, err := ob.Enqueue(entry(peerA, i)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "attempts in flight", func() bool { return ob.Peer(peerA).InFlight == 10 })
	ob.Close()
	if es, _ := st.Entries(); len(es) != 10 {
		t.Fatalf("%d entries stored, want all 10 kept for the next start", len(es))
	}
	for _, e := range must(st.Entries()) {
		if e.Attempts != 0 {
			t.Fatalf("shutdown counted as a failed attempt: %+v", e)
		}
	}
	if _, _, err := ob.Enqueue(entry(peerA, 11)); !errors.Is(err, ErrClosed) {
		t.Fatalf("enqueue after close: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestLimitsAndValidation(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	rcv.setDown(true)
	ob, err := New(st, rcv, Options{MaxEntries: 3, MaxBytes: 1 << 20, Backoff: []time.Duration{time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	for i := range 3 {
		if _, _, err := ob.Enqueue(entry(peerB, i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := ob.Enqueue(entry(peerB, 3)); !errors.Is(err, ErrFull) {
		t.Fatalf("4th entry: %v, want ErrFull", err)
	}
	big := entry(peerA, 0)
	big.Payload = make([]byte, 2<<20)
	bad := []Entry{{ID: identity.NewUUID(), Payload: []byte("x")}, {To: peerA, Payload: []byte("x")}, {To: peerA, ID: identity.NewUUID()}}
	for i, e := range bad {
		if _, _, err := ob.Enqueue(e); err == nil {
			t.Errorf("invalid entry %d accepted", i)
		}
	}
	ob2, _ := New(NewMemStore(), rcv, Options{MaxBytes: 1 << 20})
	defer ob2.Close()
	if _, _, err := ob2.Enqueue(big); !errors.Is(err, ErrFull) {
		t.Fatalf("oversized entry: %v, want ErrFull", err)
	}
	if got := len(ob.List()); got != 3 {
		t.Fatalf("List: %d entries", got)
	}
	for _, q := range ob.List() {
		if q.Payload != nil {
			t.Fatal("List returned payloads")
		}
	}
}

func TestConcurrentPeers(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	rcv.loseAt = 13
	ob, err := New(st, rcv, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	ob.Start()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ts []*Ticket
	ids := map[identity.UUID]bool{}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			to := peerA
			if g%2 == 1 {
				to = peerB
			}
			for i := range 100 {
				e, tk, err := ob.Enqueue(entry(to, i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ts = append(ts, tk)
				ids[e.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	waitTickets(t, ts)
	ob.Close()
	_, stored, _ := rcv.snapshot()
	if len(stored) != len(ids) || len(ids) != 800 {
		t.Fatalf("%d distinct arrivals of %d sent", len(stored), len(ids))
	}
	for id := range ids {
		if stored[id] == 0 {
			t.Fatalf("%s never arrived", id)
		}
	}
}

type deliverFunc func(context.Context, Attempt) error

func (f deliverFunc) Deliver(ctx context.Context, a Attempt) error { return f(ctx, a) }

// Kick ends the wait of every envelope that failed, not only the oldest.
func TestKickReleasesWholeQueue(t *testing.T) {
	testutil.CheckGoroutines(t)
	var down atomic.Bool
	down.Store(true)
	// The first round fails only once all three are in flight, so each
	// of them has failed and waits out the hour-long backoff.
	var started atomic.Int32
	allIn := make(chan struct{})
	d := deliverFunc(func(ctx context.Context, a Attempt) error {
		a.Queued()
		if !down.Load() {
			return nil
		}
		if started.Add(1) == 3 {
			close(allIn)
		}
		select {
		case <-allIn:
		case <-ctx.Done():
			return ctx.Err()
		}
		return errors.New("connection reset")
	})
	ob, err := New(NewMemStore(), d, Options{Backoff: []time.Duration{time.Hour}, BreakerFailures: 1 << 30, Window: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	_, ts := enqueueN(t, ob, peerA, 3)
	for _, tk := range ts {
		select {
		case <-tk.Attempted():
		case <-time.After(10 * time.Second):
			t.Fatal("first round did not end")
		}
	}
	down.Store(false)
	ob.Kick(peerA)
	waitTickets(t, ts)
}

// Whoever wakes on Attempted sees Done already closed for an acked
// envelope.
func TestTicketDoneBeforeAttempted(t *testing.T) {
	for range 2000 {
		tk := newTicket()
		go tk.finish(nil)
		<-tk.Attempted()
		select {
		case <-tk.Done():
		default:
			t.Fatal("Attempted closed before Done for a finished ticket")
		}
	}
}

// failingKill is a MemStore whose Kill always fails.
type failingKill struct {
	*MemStore
	kills atomic.Int64
}

func (f *failingKill) Kill(identity.UUID, string, time.Time) error {
	f.kills.Add(1)
	return errors.New("disk full")
}

// An expired envelope the store cannot move to the dead letters stays in
// place: nothing behind it overtakes it, and the worker does not spin.
func TestExpiredButKillFails(t *testing.T) {
	testutil.CheckGoroutines(t)
	st := &failingKill{MemStore: NewMemStore()}
	rcv := newReceiver()
	ob, err := New(st, rcv, Options{Backoff: []time.Duration{50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ob.Start()
	e1 := entry(peerA, 1)
	e1.Expires = time.Now().Add(-time.Second)
	if _, _, err := ob.Enqueue(e1); err != nil {
		t.Fatal(err)
	}
	_, tk2, err := ob.Enqueue(entry(peerA, 2))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the move to the dead letters to be retried", func() bool { return st.kills.Load() >= 3 })
	ob.Close()
	select {
	case <-tk2.Done():
		t.Fatal("the envelope behind an expired one that could not be moved was delivered first")
	default:
	}
	if _, stored, _ := rcv.snapshot(); len(stored) != 0 {
		t.Fatalf("delivered %d envelopes past the stuck one", len(stored))
	}
	// Three retries take at least 100 ms at a 50 ms backoff; a spinning
	// worker makes tens of thousands of attempts in that time.
	if n := st.kills.Load(); n > 1000 {
		t.Fatalf("%d Kill attempts: the worker spins instead of backing off", n)
	}
}

// enqueueN enqueues entries 0..n-1 to peer and returns their ids and
// tickets in order.
func enqueueN(t *testing.T, ob *Outbox, peer identity.PeerID, n int) ([]identity.UUID, []*Ticket) {
	t.Helper()
	var ids []identity.UUID
	var ts []*Ticket
	for i := range n {
		e, tk, err := ob.Enqueue(entry(peer, i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
		ts = append(ts, tk)
	}
	return ids, ts
}

// Abandon dead-letters a peer's queued envelopes of one kind, leaving
// other kinds, other peers and envelopes in flight alone; their tickets
// end with the reason. Attempts carry the entry's kind.
func TestAbandonOneKind(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	rcv.setDown(true)
	ob, err := New(st, rcv, Options{Backoff: []time.Duration{time.Hour}, BreakerFailures: 1 << 30, MaxAttempts: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	var tickets []*Ticket
	kinds := []string{"meup", "message", "meup", "meup"}
	for i, k := range kinds {
		e := entry(peerA, i)
		e.Kind = k
		_, tk, err := ob.Enqueue(e)
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	other := entry(peerB, 9)
	other.Kind = "meup"
	if _, _, err := ob.Enqueue(other); err != nil {
		t.Fatal(err)
	}
	<-tickets[0].Attempted() // the first failed; everything waits an hour
	testutil.WaitFor(t, 10*time.Second, "the first attempt to settle", func() bool {
		for _, q := range ob.List() {
			if q.InFlight {
				return false
			}
		}
		return true
	})
	if n := ob.Abandon(peerA, "meup", ReasonRejected+": does not take it"); n != 3 {
		t.Fatalf("abandoned %d, want the 3 meup envelopes to peer A", n)
	}
	for i, tk := range tickets {
		select {
		case <-tk.Done():
			var de *DeadError
			if kinds[i] != "meup" || !errors.As(tk.Err(), &de) || de.Reason != ReasonRejected+": does not take it" {
				t.Errorf("ticket %d (%s): %v", i, kinds[i], tk.Err())
			}
		default:
			if kinds[i] == "meup" {
				t.Errorf("ticket %d (meup) still open", i)
			}
		}
	}
	if got := ob.Len(); got != 2 {
		t.Fatalf("%d queued, want the message to A and the meup to B", got)
	}
	dead, err := ob.DeadLetters()
	if err != nil || len(dead) != 3 {
		t.Fatalf("dead letters %d, %v", len(dead), err)
	}
	if n := ob.Abandon(identity.PeerID{}, "meup", ReasonRejected); n != 0 {
		t.Fatalf("a peer with nothing queued: %d", n)
	}
}

// Every attempt carries its entry's kind.
func TestAttemptCarriesKind(t *testing.T) {
	testutil.CheckGoroutines(t)
	var mu sync.Mutex
	var kinds []string
	d := deliverFunc(func(_ context.Context, a Attempt) error {
		mu.Lock()
		kinds = append(kinds, a.Kind)
		mu.Unlock()
		a.Queued()
		return nil
	})
	ob, err := New(NewMemStore(), d, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	var ts []*Ticket
	for i, k := range []string{"meup", "request", "response"} {
		e := entry(peerA, i)
		e.Kind = k
		_, tk, err := ob.Enqueue(e)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tk)
	}
	waitTickets(t, ts)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(kinds, []string{"meup", "request", "response"}) {
		t.Fatalf("attempt kinds %v", kinds)
	}
}

// Prune removes the dead letters past Options.DeadLetterAge and the
// oldest beyond Options.MaxDeadLetters, each reported to Observe for the
// audit log; queued envelopes stay.
func TestPruneDeadLetters(t *testing.T) {
	st := NewMemStore()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := mustPeer(1)
	var dead []Entry
	for i := range 5 {
		e := must(st.Add(entry(p, i)))
		died := now.Add(-time.Minute)
		if i == 0 {
			died = now.Add(-48 * time.Hour) // past the retention
		}
		if err := st.Kill(e.ID, ReasonExhausted+": gone", died); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, e)
	}
	queued := must(st.Add(entry(p, 9)))
	var mu sync.Mutex
	var got []Event
	opts := fastOpts()
	opts.MaxDeadLetters, opts.DeadLetterAge = 2, 24*time.Hour
	opts.Now = func() time.Time { return now }
	opts.Observe = func(ev Event) { mu.Lock(); got = append(got, ev); mu.Unlock() }
	ob := must(New(st, deliverFunc(func(context.Context, Attempt) error { return errors.New("down") }), opts))
	defer ob.Close()
	n, err := ob.Prune()
	if err != nil || n != 3 {
		t.Fatalf("Prune = %d, %v; want 3", n, err)
	}
	left := must(ob.DeadLetters())
	if len(left) != 2 || left[0].ID != dead[3].ID || left[1].ID != dead[4].ID {
		t.Fatalf("dead letters left: %d, want the 2 newest", len(left))
	}
	mu.Lock()
	defer mu.Unlock()
	want := []struct {
		id     identity.UUID
		reason string
	}{
		{dead[0].ID, PruneAge + ": " + ReasonExhausted + ": gone"},
		{dead[1].ID, PruneCap + ": " + ReasonExhausted + ": gone"},
		{dead[2].ID, PruneCap + ": " + ReasonExhausted + ": gone"},
	}
	var drops []Event
	for _, ev := range got {
		if ev.Type == EventDroppedDeadLetter {
			drops = append(drops, ev)
		}
	}
	if len(drops) != len(want) {
		t.Fatalf("%d %s events, want %d", len(drops), EventDroppedDeadLetter, len(want))
	}
	for i, w := range want {
		if drops[i].Entry.ID != w.id || drops[i].Reason != w.reason {
			t.Errorf("event %d: %s %q, want %s %q", i, drops[i].Entry.ID, drops[i].Reason, w.id, w.reason)
		}
	}
	if es := must(st.Entries()); len(es) != 1 || es[0].ID != queued.ID {
		t.Fatalf("outbox after Prune: %d entries, want the queued one", len(es))
	}
}

// Retry makes a peer's queue due at once, breaker open or not, only for
// the peers named (or every peer), and counts what it made due.
func TestRetryMakesQueueDue(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	rcv.setDown(true)
	ob, err := New(st, rcv, Options{Backoff: []time.Duration{time.Hour}, BreakerFailures: 1, BreakerOpen: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	var tickets []*Ticket
	for i, p := range []identity.PeerID{peerA, peerA, peerB} {
		_, tk, err := ob.Enqueue(entry(p, i))
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	<-tickets[0].Attempted()
	<-tickets[2].Attempted()
	testutil.WaitFor(t, 10*time.Second, "both breakers to open", func() bool {
		return ob.Peer(peerA).Breaker == BreakerOpen && ob.Peer(peerB).Breaker == BreakerOpen
	})
	rcv.setDown(false)
	if n := ob.Retry(mustPeer(9)); n != 0 {
		t.Fatalf("retry of a peer with nothing queued made %d due", n)
	}
	if n := ob.Retry(peerA); n != 2 {
		t.Fatalf("retry of peer A made %d due, want 2", n)
	}
	waitTickets(t, tickets[:2])
	if ob.Peer(peerA).Breaker != BreakerClosed {
		t.Fatalf("A's breaker after its probe succeeded: %+v", ob.Peer(peerA))
	}
	// B was not named: it still waits for its breaker (an hour).
	if s := ob.Peer(peerB); s.Queued != 1 || s.Breaker != BreakerOpen {
		t.Fatalf("B after retrying A: %+v", s)
	}
	if n := ob.Retry(); n != 1 {
		t.Fatalf("retry of every peer made %d due, want 1", n)
	}
	waitTickets(t, tickets[2:])
}

// An attempt whose host name does not resolve says so in its last
// error, waits on the resolve schedule and leaves the breaker closed.
func TestResolveFailureOwnSchedule(t *testing.T) {
	testutil.CheckGoroutines(t)
	var calls atomic.Int32
	d := deliverFunc(func(ctx context.Context, a Attempt) error {
		calls.Add(1)
		return fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "nowhere.invalid", IsNotFound: true}})
	})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ob, err := New(NewMemStore(), d, Options{Backoff: []time.Duration{time.Second}, ResolveBackoff: []time.Duration{7 * time.Minute},
		BreakerFailures: 1, BreakerOpen: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	_, tk, err := ob.Enqueue(entry(peerA, 0))
	if err != nil {
		t.Fatal(err)
	}
	<-tk.Attempted()
	if tk.LastError() != ResolveFailed+": lookup nowhere.invalid: no such host" {
		t.Fatalf("last error %q", tk.LastError())
	}
	testutil.WaitFor(t, 10*time.Second, "the failure to be recorded", func() bool { return ob.Peer(peerA).LastError != "" })
	s := ob.Peer(peerA)
	if s.Breaker != BreakerClosed || s.Failures != 0 || !s.NextAttempt.Equal(now.Add(7*time.Minute)) {
		t.Fatalf("peer state after a name-resolution failure: %+v", s)
	}
	q := ob.List()
	if len(q) != 1 || !strings.HasPrefix(q[0].LastError, ResolveFailed) {
		t.Fatalf("entry %+v", q)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}

// broker is a fake store-and-forward broker in front of a peer: it keeps
// what it is given, in order and once per id; while the peer is away it
// answers ErrStored, once the peer is back it acknowledges.
type broker struct {
	mu    sync.Mutex
	up    bool
	order []identity.UUID
	have  map[identity.UUID]bool
}

func (b *broker) Deliver(_ context.Context, a Attempt) error {
	b.mu.Lock()
	if !b.have[a.ID] {
		b.have[a.ID] = true
		b.order = append(b.order, a.ID)
	}
	up := b.up
	b.mu.Unlock()
	a.Queued()
	if !up {
		return fmt.Errorf("peer away: %w", ErrStored)
	}
	return nil
}

// Envelopes a broker stored do not hold back the queue: all of them reach
// the broker in order while the peer is away, with no failure counted
// against the breaker; each entry stays until the peer acknowledges it.
func TestStoredEntriesDoNotHoldTheQueue(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, b := NewMemStore(), &broker{have: map[identity.UUID]bool{}}
	var mu sync.Mutex
	events := map[string]int{}
	opts := Options{Window: 4, BreakerFailures: 1, StoredRecheck: 20 * time.Millisecond,
		Observe: func(ev Event) { mu.Lock(); events[ev.Type]++; mu.Unlock() }}
	ob, err := New(st, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	want, ts := enqueueN(t, ob, peerA, 100)
	testutil.WaitFor(t, 10*time.Second, "every envelope to reach the broker", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.order) == 100
	})
	b.mu.Lock()
	if !slices.Equal(b.order, want) {
		t.Fatal("the broker got the envelopes out of order")
	}
	b.mu.Unlock()
	if s := ob.Peer(peerA); s.Queued != 100 || s.Breaker != BreakerClosed {
		t.Fatalf("while the peer is away: %+v (want all 100 queued, breaker closed)", s)
	}
	for i, tk := range ts {
		select {
		case <-tk.Done():
			t.Fatalf("ticket %d done before the peer acknowledged", i)
		default:
		}
	}
	// Each one's first attempt has ended, stored: a send waiting for it
	// goes on.
	for i, tk := range ts {
		select {
		case <-tk.Attempted():
		case <-time.After(10 * time.Second):
			t.Fatalf("ticket %d: its first attempt did not end, although the broker stored it", i)
		}
		if !tk.Stored() || tk.Err() != nil {
			t.Fatalf("ticket %d: stored %v, err %v", i, tk.Stored(), tk.Err())
		}
	}
	// The broker holds an envelope a moment before its send reports it
	// stored.
	testutil.WaitFor(t, 10*time.Second, "every envelope reported stored", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return events[EventStored] >= 100
	})
	mu.Lock()
	if events[EventRetry] != 0 {
		t.Fatalf("events while the peer is away: %v", events)
	}
	mu.Unlock()
	b.mu.Lock()
	b.up = true
	b.mu.Unlock()
	waitTickets(t, ts)
	// A ticket is done once its ack came; its entry goes just after.
	testutil.WaitFor(t, 10*time.Second, "no entry left once the peer acknowledged everything", func() bool {
		es, _ := st.Entries()
		return len(es) == 0
	})
}

// Entries stored with attempt counts no schedule has (a store from
// elsewhere, a hand-edited row) fail their next attempt like any other,
// and nothing panics: one past every limit becomes a dead letter, a
// negative one counts as never tried.
func TestOddStoredAttemptCounts(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	rcv.setDown(true)
	huge, negative := entry(peerA, 0), entry(peerB, 1)
	huge.Attempts, negative.Attempts = math.MaxInt, -5
	for _, e := range []Entry{huge, negative} {
		if _, err := st.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	ob, err := New(st, rcv, Options{Backoff: []time.Duration{time.Millisecond, time.Hour}, BreakerFailures: 1 << 30, MaxAttempts: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	ob.Start()
	defer ob.Close()
	testutil.WaitFor(t, 10*time.Second, "the huge count to be a dead letter", func() bool {
		dl, err := st.DeadLetters()
		return err == nil && len(dl) == 1 && dl[0].ID == huge.ID
	})
	testutil.WaitFor(t, 10*time.Second, "the negative count to wait its second step", func() bool {
		l := ob.List()
		return len(l) == 1 && l[0].ID == negative.ID && l[0].Attempts == 2 && time.Until(l[0].NextAttempt) > 30*time.Minute
	})
}

func TestBackoffStep(t *testing.T) {
	o := &Outbox{opts: Options{Backoff: []time.Duration{1, 2, 3}}}
	for n, want := range map[int]time.Duration{math.MinInt: 1, -5: 1, 0: 1, 1: 1, 2: 2, 3: 3, 4: 3, math.MaxInt: 3} {
		if got := o.backoff(n); got != want {
			t.Errorf("backoff(%d) = %v, want %v", n, got, want)
		}
	}
}

// An envelope waiting out a long backoff is dead-lettered when its
// time-to-live passes, not only at its next attempt.
func TestExpiresDuringBackoff(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	rcv.setDown(true)
	ob, err := New(st, rcv, Options{Backoff: []time.Duration{time.Hour}, BreakerFailures: 1 << 30, MaxAttempts: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	e := entry(peerA, 0)
	e.Expires = time.Now().Add(300 * time.Millisecond)
	_, tk, err := ob.Enqueue(e)
	if err != nil {
		t.Fatal(err)
	}
	<-tk.Attempted() // failed: the next attempt is an hour away
	select {
	case <-tk.Done():
		var de *DeadError
		if !errors.As(tk.Err(), &de) || !strings.HasPrefix(de.Reason, ReasonExpired) {
			t.Fatalf("ticket ended with %v, want expired", tk.Err())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("not expired 20 s after its time-to-live; queued: %+v", ob.List())
	}
	if dl, err := st.DeadLetters(); err != nil || len(dl) != 1 {
		t.Fatalf("dead letters %d (%v), want 1", len(dl), err)
	}
}

// Reviving dead letters keeps to the outbox's limits: those that fit are
// queued in order, the rest stay dead letters and the caller is told.
func TestReviveKeepsToTheLimits(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	rcv.setDown(true)
	var ids []identity.UUID
	for i := range 5 {
		e, err := st.Add(entry(peerA, i))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Kill(e.ID, ReasonExpired, time.Now()); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	ob, err := New(st, rcv, Options{Backoff: []time.Duration{time.Hour}, BreakerFailures: 1 << 30, MaxAttempts: 1 << 30, MaxEntries: 3})
	if err != nil {
		t.Fatal(err)
	}
	ob.Start()
	defer ob.Close()
	n, err := ob.Revive()
	if n != 3 || !errors.Is(err, ErrFull) {
		t.Fatalf("Revive() = %d, %v; want 3 and ErrFull", n, err)
	}
	if got := ob.Len(); got != 3 {
		t.Fatalf("%d queued, want 3", got)
	}
	dl, err := st.DeadLetters()
	if err != nil || len(dl) != 2 || dl[0].ID != ids[3] || dl[1].ID != ids[4] {
		t.Fatalf("dead letters left %v (%v), want the last two", dl, err)
	}
	if n, err := ob.Revive(ids[4], ids[4]); n != 0 || !errors.Is(err, ErrFull) {
		t.Fatalf("Revive when full = %d, %v; want 0 and ErrFull", n, err)
	}
}

// Peers lists the peers with something queued or a breaker not closed: a
// breaker loaded from the store with failures counted but closed, and
// nothing queued, is not listed; an open one is.
func TestPeersListsOnlyQueuedOrNotClosed(t *testing.T) {
	testutil.CheckGoroutines(t)
	st := NewMemStore()
	if err := st.SaveBreaker(Breaker{Peer: peerA, Failures: 2}); err != nil {
		t.Fatal(err)
	}
	ob, err := New(st, &broker{have: map[identity.UUID]bool{}, up: true}, Options{BreakerFailures: 5, BreakerOpen: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if ps := ob.Peers(); len(ps) != 0 {
		t.Fatalf("peers %+v, want none: nothing queued, breaker closed", ps)
	}
	if err := st.SaveBreaker(Breaker{Peer: peerA, Failures: 5, OpenUntil: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	ob2, err := New(st, &broker{have: map[identity.UUID]bool{}, up: true}, Options{BreakerFailures: 5, BreakerOpen: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer ob2.Close()
	if ps := ob2.Peers(); len(ps) != 1 || ps[0].Breaker != BreakerOpen {
		t.Fatalf("peers %+v, want peer A with its breaker open", ps)
	}
}

// Withdraw dead-letters one queued envelope with the reason given, and
// leaves alone one being attempted, one of another peer and an unknown
// id.
func TestWithdraw(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, rcv := NewMemStore(), newReceiver()
	rcv.block = make(chan struct{})
	ob, err := New(st, rcv, Options{Window: 1, Backoff: []time.Duration{time.Hour}, BreakerFailures: 1 << 30, MaxAttempts: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	first, second := entry(peerA, 0), entry(peerA, 1)
	// One in flight at a time: the second stays queued behind the first.
	_, t1, err := ob.Enqueue(first)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the first attempt to start", func() bool {
		for _, q := range ob.List() {
			if q.ID == first.ID && q.InFlight {
				return true
			}
		}
		return false
	})
	_, t2, err := ob.Enqueue(second)
	if err != nil {
		t.Fatal(err)
	}
	if ob.Withdraw(peerA, first.ID, ReasonDeadline) {
		t.Fatal("withdrew an envelope being attempted")
	}
	if ob.Withdraw(peerB, second.ID, ReasonDeadline) || ob.Withdraw(peerA, identity.NewUUID(), ReasonDeadline) {
		t.Fatal("withdrew under another peer, or an unknown id")
	}
	const reason = ReasonDeadline + ": past it"
	if !ob.Withdraw(peerA, second.ID, reason) {
		t.Fatal("the queued envelope was not withdrawn")
	}
	var de *DeadError
	<-t2.Done()
	if err := t2.Err(); !errors.As(err, &de) || de.Reason != reason {
		t.Fatalf("withdrawn envelope's ticket: %v", err)
	}
	if ob.Withdraw(peerA, second.ID, reason) {
		t.Fatal("withdrew it twice")
	}
	dead, err := ob.DeadLetters()
	if err != nil || len(dead) != 1 || dead[0].ID != second.ID || dead[0].Reason != reason {
		t.Fatalf("dead letters %+v, %v", dead, err)
	}
	close(rcv.block)
	<-t1.Done()
	if err := t1.Err(); err != nil {
		t.Fatalf("the envelope being attempted: %v", err)
	}
}

// An envelope a broker holds already is not withdrawn: the broker will
// deliver it whatever the outbox does.
func TestWithdrawStored(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, b := NewMemStore(), &broker{have: map[identity.UUID]bool{}}
	ob, err := New(st, b, Options{Window: 1, StoredRecheck: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	e := entry(peerA, 0)
	_, tk, err := ob.Enqueue(e)
	if err != nil {
		t.Fatal(err)
	}
	<-tk.Attempted()
	testutil.WaitFor(t, 10*time.Second, "the stored attempt to settle", func() bool {
		q := ob.List()
		return len(q) == 1 && !q[0].InFlight
	})
	if !tk.Stored() || ob.Withdraw(peerA, e.ID, ReasonDeadline) {
		t.Fatalf("withdrew an envelope the broker holds (stored %v)", tk.Stored())
	}
	if ob.Len() != 1 {
		t.Fatalf("%d queued, want it kept", ob.Len())
	}
	// Nor is it dropped: the listing and the peer's state say the
	// broker holds it.
	if did := ob.DropQueued(e.ID); did[e.ID] != DropStored || ob.Len() != 1 {
		t.Fatalf("DropQueued of a stored envelope: %v (%d queued)", did, ob.Len())
	}
	if q, p := ob.List(), ob.Peer(peerA); !q[0].Stored || p.Stored != 1 || p.Queued != 1 {
		t.Fatalf("listing %+v, peer %+v: want it marked stored", q, p)
	}
}

// An envelope a broker holds when its time-to-live passes is a dead
// letter whose reason and event say the broker may still deliver it;
// one that only failed says its last attempt's error.
func TestExpiresWhileStored(t *testing.T) {
	testutil.CheckGoroutines(t)
	st, b := NewMemStore(), &broker{have: map[identity.UUID]bool{}}
	var mu sync.Mutex
	var expired []Event
	ob, err := New(st, b, Options{StoredRecheck: time.Hour, Observe: func(ev Event) {
		if ev.Type == EventExpired {
			mu.Lock()
			expired = append(expired, ev)
			mu.Unlock()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	e := entry(peerA, 0)
	e.Expires = time.Now().Add(2 * time.Second) // the fake broker stores it well before
	_, tk, err := ob.Enqueue(e)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tk.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("not expired 20 s after its time-to-live; queued: %+v", ob.List())
	}
	var de *DeadError
	if !tk.Stored() || !errors.As(tk.Err(), &de) || de.Reason != ReasonExpired+": "+ExpiredStored {
		t.Fatalf("ticket ended with %v (stored %v), want expired while the broker holds it", tk.Err(), tk.Stored())
	}
	if p := ob.Peer(peerA); p.Stored != 0 || p.Queued != 0 {
		t.Fatalf("peer %+v after the stored envelope expired: want nothing queued or stored", p)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(expired) != 1 || !expired[0].Stored || expired[0].Reason != de.Reason {
		t.Fatalf("expired events %+v, want one, stored", expired)
	}
}

// diskAfterCrash is what a process that died now leaves for the next:
// the store's entries as they are, in a store of their own.
func diskAfterCrash(t *testing.T, st *MemStore) *MemStore {
	t.Helper()
	disk := NewMemStore()
	for _, e := range must(st.Entries()) {
		if _, err := disk.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	return disk
}

// An attempt under way when the process dies counts: the first attempt
// of an entry loaded from the store is recorded before it starts, so a
// daemon that crashes during it on every start (a crash loop) still
// runs the entry out of attempts, and the entry then goes to the dead
// letters without another attempt. A clean shutdown, or an attempt
// that settles, leaves the record as it would have been; an entry
// enqueued in this process is not recorded ahead (no extra write per
// send).
func TestStopDuringAnAttemptCounts(t *testing.T) {
	testutil.CheckGoroutines(t)
	opts := fastOpts()
	opts.MaxAttempts = 4
	opts.Backoff = []time.Duration{time.Hour}
	disk := NewMemStore()
	e := entry(peerA, 0)
	e.Attempts, e.LastError = 2, "connection refused"
	if _, err := disk.Add(e); err != nil {
		t.Fatal(err)
	}
	// Three processes in a row die during the attempt: the last of them
	// made the one more given at exactly MaxAttempts.
	for attempts := 3; attempts <= 5; attempts++ {
		before := must(disk.Entries())[0]
		rcv := newReceiver()
		rcv.block = make(chan struct{}) // the ack never comes
		ob, err := New(disk, rcv, opts)
		if err != nil {
			t.Fatal(err)
		}
		// The stored backoff would hold it: let it go now.
		ob.Retry(peerA)
		ob.Start()
		testutil.WaitFor(t, 10*time.Second, "the attempt to be under way and recorded", func() bool {
			es, err := disk.Entries()
			return ob.Peer(peerA).InFlight == 1 && err == nil && len(es) == 1 && es[0].Attempts == attempts
		})
		crashed := diskAfterCrash(t, disk)
		got := must(crashed.Entries())
		if len(got) != 1 || got[0].Attempts != attempts || got[0].LastError != stoppedDuring || time.Until(got[0].NextAttempt) < 30*time.Minute {
			t.Fatalf("stored during attempt %d: %+v", attempts, got)
		}
		ob.Close() // a clean stop: the attempt did not count
		if got := must(disk.Entries()); len(got) != 1 || got[0].Attempts != attempts-1 || got[0].LastError != before.LastError {
			t.Fatalf("after a clean stop during attempt %d: %+v", attempts, got)
		}
		disk = crashed
	}
	// The next start finds the attempts run out: a dead letter, not sent.
	rcv := newReceiver()
	ob, err := New(disk, rcv, opts)
	if err != nil {
		t.Fatal(err)
	}
	ob.Retry(peerA)
	ob.Start()
	testutil.WaitFor(t, 10*time.Second, "the entry to be a dead letter", func() bool {
		dl, err := disk.DeadLetters()
		return err == nil && len(dl) == 1
	})
	ob.Close()
	dl := must(disk.DeadLetters())
	if !strings.HasPrefix(dl[0].Reason, ReasonExhausted+": 5 attempts failed") || !strings.Contains(dl[0].Reason, stoppedDuring) {
		t.Fatalf("dead letter: %+v", dl[0])
	}
	if _, _, calls := rcv.snapshot(); calls != 0 {
		t.Fatalf("the exhausted entry was attempted again (%d calls)", calls)
	}

	// Found at exactly MaxAttempts: its last attempt may have been
	// acknowledged with the removal lost in the stop. One more attempt,
	// and the peer (which has it) acknowledges it again: delivered.
	last := entry(peerA, 2)
	last.Attempts, last.LastError = 4, stoppedDuring
	acking := newReceiver()
	disk = NewMemStore()
	if _, err := disk.Add(last); err != nil {
		t.Fatal(err)
	}
	ob, err = New(disk, acking, opts)
	if err != nil {
		t.Fatal(err)
	}
	ob.Retry(peerA)
	ob.Start()
	testutil.WaitFor(t, 10*time.Second, "the entry to be delivered", func() bool { return ob.Len() == 0 })
	ob.Close()
	if dl := must(disk.DeadLetters()); len(dl) != 0 {
		t.Fatalf("delivered, yet a dead letter: %+v", dl)
	}
	if _, stored, _ := acking.snapshot(); stored[last.ID] != 1 {
		t.Fatalf("the peer got it %d times", stored[last.ID])
	}

	// Enqueued in this process: nothing recorded ahead of its attempt.
	st := NewMemStore()
	blocked := newReceiver()
	blocked.block = make(chan struct{})
	ob, err = New(st, blocked, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	ob.Start()
	if _, _, err := ob.Enqueue(entry(peerA, 1)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the attempt to be under way", func() bool {
		_, stored, _ := blocked.snapshot()
		return len(stored) == 1 // the receiver has it: the attempt started long ago
	})
	if got := must(st.Entries()); len(got) != 1 || got[0].Attempts != 0 || got[0].LastError != "" {
		t.Fatalf("an entry enqueued here, during its first attempt: %+v", got)
	}
	ob.Close()
}

// A loaded entry whose recorded attempt a broker stored (not a failure)
// is put back as it was, no attempt counted, no stop reported, but
// without its last error: that attempt did not fail.
func TestStoredAttemptOfALoadedEntryIsNotCounted(t *testing.T) {
	testutil.CheckGoroutines(t)
	st := NewMemStore()
	e := entry(peerA, 0)
	e.Attempts, e.LastError = 1, "connection refused"
	if _, err := st.Add(e); err != nil {
		t.Fatal(err)
	}
	b := &broker{have: map[identity.UUID]bool{}}
	ob, err := New(st, b, Options{StoredRecheck: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ob.Start()
	defer ob.Close()
	testutil.WaitFor(t, 10*time.Second, "the broker to store it", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.order) == 1
	})
	testutil.WaitFor(t, 10*time.Second, "the attempt to settle", func() bool { return ob.Peer(peerA).InFlight == 0 })
	if got := must(st.Entries()); len(got) != 1 || got[0].Attempts != 1 || got[0].LastError != "" {
		t.Fatalf("after the broker stored it: %+v", got)
	}
}

// An attempt that failed on this node's side (ErrLocal: its NATS
// connection down) counts as an attempt but leaves the peer's breaker
// closed; one the broker then stores clears the entry's last error.
func TestLocalFailureLeavesTheBreaker(t *testing.T) {
	testutil.CheckGoroutines(t)
	var calls atomic.Int32
	d := deliverFunc(func(ctx context.Context, a Attempt) error {
		if calls.Add(1) == 1 {
			return fmt.Errorf("peer offline: %w", ErrLocal)
		}
		a.Queued()
		return fmt.Errorf("peer away: %w", ErrStored)
	})
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	ob, err := New(NewMemStore(), d, Options{Backoff: []time.Duration{time.Millisecond}, BreakerFailures: 1, BreakerOpen: time.Hour,
		StoredRecheck: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.Start()
	_, tk, err := ob.Enqueue(entry(peerA, 0))
	if err != nil {
		t.Fatal(err)
	}
	<-tk.Attempted()
	testutil.WaitFor(t, 10*time.Second, "the failure to be recorded", func() bool { return ob.Peer(peerA).LastError != "" })
	if s := ob.Peer(peerA); s.Breaker != BreakerClosed || s.Failures != 0 {
		t.Fatalf("peer state after a local failure: %+v", s)
	}
	if q := ob.List(); len(q) != 1 || q[0].Attempts != 1 || !strings.Contains(q[0].LastError, "peer offline") {
		t.Fatalf("entry after a local failure: %+v", q)
	}
	mu.Lock()
	clock = clock.Add(time.Second) // past the backoff
	mu.Unlock()
	ob.Kick(peerA)
	testutil.WaitFor(t, 10*time.Second, "the second attempt, stored", func() bool {
		q := ob.List()
		return calls.Load() >= 2 && len(q) == 1 && q[0].LastError == ""
	})
}
