package outbox

import "time"

// Bounds are the longest an outbox's policy can make anything wait, from
// now: the times the outbox schedules by are never allowed to hold an
// entry or a breaker longer than that.
//
// An entry's NextAttempt and Expires and a breaker's OpenUntil are wall
// clock times, and the store keeps them as such. Written while the clock
// was wrong (set years ahead, then corrected), they would hold a peer's
// queue until that far-off time, across restarts. So the [Outbox] bounds
// every one of them when it loads it and again whenever it compares it
// with the clock: a next attempt is at most [Bounds.Wait] away, an open
// breaker's probe at most [Bounds.Open] and an expiry at most [Bounds.TTL].
// A time within its bound is left as it is (the policy never sets one
// beyond it), so only a wrong clock, or a policy shortened since the time
// was stored, changes anything.
type Bounds struct {
	// Wait is the longest wait the policy sets before an entry's next
	// attempt: the longest step of Options.Backoff or
	// Options.ResolveBackoff, or Options.StoredRecheck.
	Wait time.Duration
	// Open is how long a breaker stays open (Options.BreakerOpen).
	Open time.Duration
	// TTL is the longest time-to-live of an entry (Options.MaxTTL).
	TTL time.Duration
}

// Bounds returns the bounds of o's policy (zero values being the
// defaults, as for [New]).
func (o Options) Bounds() Bounds {
	o.setDefaults()
	return o.bounds()
}

// bounds is Bounds for options whose defaults are set.
func (o *Options) bounds() Bounds {
	w := o.StoredRecheck
	for _, d := range o.Backoff {
		w = max(w, d)
	}
	for _, d := range o.ResolveBackoff {
		w = max(w, d)
	}
	return Bounds{Wait: w, Open: o.BreakerOpen, TTL: o.MaxTTL}
}

// Entry returns e with its NextAttempt and Expires at most b.Wait and
// b.TTL after now.
func (b Bounds) Entry(e Entry, now time.Time) Entry {
	e.NextAttempt = bound(e.NextAttempt, now, b.Wait)
	e.Expires = bound(expiry(e, b.TTL), now, b.TTL)
	return e
}

// Breaker returns br with its OpenUntil at most b.Open after now.
func (b Bounds) Breaker(br Breaker, now time.Time) Breaker {
	br.OpenUntil = bound(br.OpenUntil, now, b.Open)
	return br
}

// bound returns t, or now+limit if t is later than that; the zero time
// (none) stays zero. A time within its bound is returned as it is, to the
// nanosecond: the views of the outbox (status, list_outbox, meerkatd
// outbox) show the same times whenever they are asked. The outbox bounds
// again at every comparison with the clock, so a wall clock stepped back
// while it runs holds nothing longer than the bound either.
func bound(t, now time.Time, limit time.Duration) time.Time {
	if t.IsZero() {
		return t
	}
	if end := now.Add(limit); t.After(end) {
		return end
	}
	return t
}

// expiry is e's expiry, at most ttl after its creation: no send lives
// longer than that, and a bound taken from the creation time stays put
// across restarts (one taken from now would move forward at each).
func expiry(e Entry, ttl time.Duration) time.Time {
	if e.Expires.IsZero() || e.Created.IsZero() {
		return e.Expires
	}
	if end := e.Created.Add(ttl); e.Expires.After(end) {
		return end
	}
	return e.Expires
}

// boundLocked bounds the times it is scheduled by; o.mu held.
func (o *Outbox) boundLocked(it *item, now time.Time) { it.e = o.bounds.Entry(it.e, now) }

// boundBreakerLocked bounds q's open breaker; o.mu held.
func (o *Outbox) boundBreakerLocked(q *peerQ, now time.Time) {
	q.breaker = o.bounds.Breaker(q.breaker, now)
}
