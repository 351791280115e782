package outbox

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// fakeClock is a settable clock for Options.Now. Its times have no
// monotonic reading, like times read back from a store.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.set(t)
	return c
}

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }

// boundsOpts schedules nothing longer than a minute between attempts, a
// breaker open for two minutes and time-to-lives up to an hour.
func boundsOpts(c *fakeClock) Options {
	return Options{Backoff: []time.Duration{time.Second, time.Minute}, ResolveBackoff: []time.Duration{30 * time.Second},
		StoredRecheck: time.Second, BreakerFailures: 1, BreakerOpen: 2 * time.Minute, MaxTTL: time.Hour,
		MaxAttempts: 1 << 30, Now: c.now}
}

func TestOutboxBounds(t *testing.T) {
	if got, want := boundsOpts(nil).Bounds(), (Bounds{Wait: time.Minute, Open: 2 * time.Minute, TTL: time.Hour}); got != want {
		t.Errorf("Bounds() = %+v, want %+v", got, want)
	}
	if got, want := (Options{}).Bounds(), (Bounds{Wait: 10 * time.Minute, Open: DefaultBreakerOpen, TTL: DefaultMaxTTL}); got != want {
		t.Errorf("default Bounds() = %+v, want %+v", got, want)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := Bounds{Wait: time.Minute, Open: 2 * time.Minute, TTL: time.Hour}
	far := now.AddDate(5, 0, 0)
	e := b.Entry(Entry{NextAttempt: far, Expires: far, Created: far}, now)
	if !e.NextAttempt.Equal(now.Add(time.Minute)) || !e.Expires.Equal(now.Add(time.Hour)) || !e.Created.Equal(far) {
		t.Errorf("far entry bounded to next %v, expires %v, created %v", e.NextAttempt, e.Expires, e.Created)
	}
	near, past := now.Add(30*time.Second), now.AddDate(-5, 0, 0)
	if e := b.Entry(Entry{NextAttempt: near, Expires: past}, now); !e.NextAttempt.Equal(near) || !e.Expires.Equal(past) {
		t.Errorf("times within the bounds changed: next %v, expires %v", e.NextAttempt, e.Expires)
	}
	if e := b.Entry(Entry{}, now); !e.NextAttempt.IsZero() || !e.Expires.IsZero() {
		t.Errorf("zero times became %v, %v", e.NextAttempt, e.Expires)
	}
	if br := b.Breaker(Breaker{Failures: 3, OpenUntil: far}, now); br.Failures != 3 || !br.OpenUntil.Equal(now.Add(2*time.Minute)) {
		t.Errorf("far breaker bounded to %+v", br)
	}
	if br := b.Breaker(Breaker{Failures: 1}, now); !br.OpenUntil.IsZero() {
		t.Errorf("closed breaker opened: %+v", br)
	}
	// A time bounded from a clock reading with a monotonic part compares
	// on the monotonic clock.
	mono := time.Now()
	if got := bound(mono.Add(time.Hour).Round(0), mono, time.Minute); got.Sub(mono) != time.Minute || got.Round(0) == got {
		t.Errorf("bounded from a monotonic reading: %v", got)
	}
	// A far expiry of an entry created in the past ends at most TTL after
	// its creation, wherever the clock reads now: restarts (a later now)
	// do not move it.
	created := now.Add(-time.Minute)
	for _, at := range []time.Time{now, now.Add(30 * time.Minute)} {
		if e := b.Entry(Entry{Created: created, Expires: far}, at); !e.Expires.Equal(created.Add(time.Hour)) {
			t.Errorf("far expiry of an entry created %v, seen at %v: %v, want %v", created, at, e.Expires, created.Add(time.Hour))
		}
	}
	// A time within its bound is left as it is, to the nanosecond, also
	// against a clock reading with a monotonic part: two views of the
	// outbox a moment apart show the same times.
	stored := time.Unix(0, mono.Add(30*time.Second).UnixNano()) // as read from a store: wall clock only
	for _, now := range []time.Time{mono, time.Now(), mono.Round(0)} {
		if got := bound(stored, now, time.Minute); got != stored || got.UnixNano() != stored.UnixNano() {
			t.Errorf("bound(%v) against %v = %v: a time within its bound changed", stored, now, got)
		}
	}
}

// After a restart, an entry and a breaker stored while the clock was five
// years ahead wait no longer than the policy allows: the entry is
// attempted once the breaker's open time and the longest backoff have
// passed from now.
func TestOutboxReloadFarAhead(t *testing.T) {
	testutil.CheckGoroutines(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newFakeClock(now)
	far := now.AddDate(5, 0, 0)
	st, rcv := NewMemStore(), newReceiver()
	e, err := st.Add(Entry{ID: identity.NewUUID(), To: peerA, Peer: "peer-1", Kind: "message", Payload: []byte("x"),
		Created: far, Expires: far.Add(time.Hour), Attempts: 7, NextAttempt: far, LastError: "refused"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SaveBreaker(Breaker{Peer: peerA, Failures: 7, OpenUntil: far}); err != nil {
		t.Fatal(err)
	}
	opts := boundsOpts(clock)
	ob, err := New(st, rcv, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	s := ob.Peer(peerA)
	if s.Breaker != BreakerOpen || !s.OpenUntil.Equal(now.Add(2*time.Minute)) || !s.NextAttempt.Equal(now.Add(time.Minute)) {
		t.Errorf("reloaded: breaker %s until %v, next attempt %v; want open until %v, next %v",
			s.Breaker, s.OpenUntil, s.NextAttempt, now.Add(2*time.Minute), now.Add(time.Minute))
	}
	if l := ob.List(); len(l) != 1 || !l[0].Expires.Equal(now.Add(time.Hour)) {
		t.Errorf("reloaded entry %+v: want it to expire at %v", l, now.Add(time.Hour))
	}
	// The first time the worker waits, it must have made the attempt.
	var callsAtPark atomic.Int64
	callsAtPark.Store(-1)
	ob.parked = func(identity.PeerID) {
		_, _, calls := rcv.snapshot()
		callsAtPark.CompareAndSwap(-1, int64(calls))
	}
	clock.add(2 * time.Minute)
	ob.Start()
	testutil.WaitFor(t, 10*time.Second, "the worker to look", func() bool { return callsAtPark.Load() >= 0 })
	if n := callsAtPark.Load(); n != 1 {
		t.Fatalf("the worker waited after %d attempts, want the entry attempted at once", n)
	}
	testutil.WaitFor(t, 10*time.Second, "the entry to be delivered", func() bool { return ob.Len() == 0 })
	if _, stored, _ := rcv.snapshot(); stored[e.ID] != 1 {
		t.Fatalf("entry arrived %d times", stored[e.ID])
	}
	if s := ob.Peer(peerA); s.Breaker != BreakerClosed {
		t.Fatalf("breaker %s after the ack", s.Breaker)
	}
}

// A clock stepped back while the daemon runs does not hold a failing
// peer's queue either: the next attempt and the open breaker, set while
// the clock was ahead, are bounded when the worker next looks. (The fake
// clock, like times loaded from a store, has no monotonic reading.)
func TestOutboxClockStepBack(t *testing.T) {
	testutil.CheckGoroutines(t)
	ahead := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newFakeClock(ahead)
	st, rcv := NewMemStore(), newReceiver()
	rcv.setDown(true)
	ob, err := New(st, rcv, boundsOpts(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	// What the worker holds each time it goes back to waiting.
	type look struct {
		inFlight, calls          int
		openUntil, next, expires time.Time
	}
	looks := make(chan look, 100)
	ob.parked = func(id identity.PeerID) {
		ob.mu.Lock()
		q := ob.peers[id]
		l := look{inFlight: q.inFlight, openUntil: q.breaker.OpenUntil}
		if len(q.items) > 0 {
			l.next, l.expires = q.items[0].e.NextAttempt, q.items[0].e.Expires
		}
		ob.mu.Unlock()
		_, _, l.calls = rcv.snapshot()
		select {
		case looks <- l:
		default:
		}
	}
	ob.Start()
	e := entry(peerA, 0)
	e.Expires = ahead.Add(30 * time.Minute)
	_, tk, err := ob.Enqueue(e)
	if err != nil {
		t.Fatal(err)
	}
	<-tk.Attempted()
	testutil.WaitFor(t, 10*time.Second, "the breaker to open", func() bool { return ob.Peer(peerA).Breaker == BreakerOpen })

	// NTP steps the clock back five years; the peer is up again.
	now := ahead.AddDate(-5, 0, 0)
	clock.set(now)
	rcv.setDown(false)
	ob.mu.Lock()
	wake(ob.peers[peerA])
	ob.mu.Unlock()
	deadline := time.After(10 * time.Second)
	var l look
	for {
		select {
		case l = <-looks:
		case <-deadline:
			t.Fatalf("after the clock stepped back (now %v) the worker still holds the queue; last look: %+v", now, l)
		}
		if l.inFlight > 0 || l.openUntil.After(now.Add(2*time.Minute)) {
			continue // from before the step
		}
		if l.calls != 1 || l.next.After(now.Add(time.Minute)) || l.expires.After(now.Add(time.Hour)) {
			t.Fatalf("after the step back (now %v): %+v; want no attempt yet, the next one within a minute, expiry within an hour", now, l)
		}
		break
	}
	clock.add(2 * time.Minute) // the breaker's open time, from the corrected clock
	ob.mu.Lock()
	wake(ob.peers[peerA])
	ob.mu.Unlock()
	waitTickets(t, []*Ticket{tk})
	if err := tk.Err(); err != nil {
		t.Fatal(err)
	}
}
