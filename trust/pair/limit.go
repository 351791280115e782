package pair

import (
	"net/netip"
	"slices"
	"strings"
	"time"
)

// limiter counts pairing attempts per source. Each source has a bucket of
// maxAttempts tries that refills one try every attemptWindow/maxAttempts
// (kept as a GCRA "theoretical arrival time", one time.Time per source:
// the bucket is full when that time is not after now). A refused attempt
// costs nothing, so a source that keeps trying is not locked out for
// longer than the refill of one try.
//
// # Fair eviction
//
// At most maxSources buckets are kept. A full bucket is the same as no
// bucket, so those are forgotten first. If every bucket is in use, the
// ones with the most tries left (the earliest arrival times; evictBatch of
// them) are forgotten: the sources that tried least lately, and forgetting
// one only gives it its tries back — it cannot lock anyone out. The sources that
// used up their tries are forgotten last, so a spray of new addresses
// pushes out its own barely used buckets, not the penalties it earned.
//
// A new source is never refused because the table is full, and there is
// no global budget a spray could use up: the right code from a fresh
// source always gets its tries. Guessing stays infeasible without one —
// a code is 128 random bits, checked against an offer id derived from it,
// and each guess costs a connection.
//
// limiter is not safe for concurrent use; the Responder guards it with
// its mutex. Its zero value is ready to use.
type limiter struct {
	tat map[string]time.Time // by source key: when its bucket is full again
}

// allow counts an attempt from key at now and reports whether it may go
// ahead.
func (l *limiter) allow(key string, now time.Time) bool {
	const every = attemptWindow / maxAttempts // one try back this often
	const tolerance = attemptWindow - every   // how far ahead tat may run
	if l.tat == nil {
		l.tat = map[string]time.Time{}
	}
	t, ok := l.tat[key]
	if !ok || t.Before(now) {
		t = now
	}
	if t.Sub(now) > tolerance {
		return false
	}
	if !ok && len(l.tat) >= maxSources {
		l.evict(now)
	}
	l.tat[key] = t.Add(every)
	return true
}

// evict makes room for new sources: it drops every full bucket, or else
// the evictBatch buckets with the most tries left — a batch, so a spray of
// new sources pays for one scan per evictBatch sources, not one each.
func (l *limiter) evict(now time.Time) {
	tats := make([]time.Time, 0, len(l.tat))
	for k, t := range l.tat {
		if !t.After(now) {
			delete(l.tat, k)
			continue
		}
		tats = append(tats, t)
	}
	if len(l.tat) < maxSources {
		return
	}
	slices.SortFunc(tats, time.Time.Compare)
	cut := tats[evictBatch-1]
	for k, t := range l.tat {
		if !t.After(cut) {
			delete(l.tat, k)
		}
	}
}

// SourceKey is the key attempts from source are counted under: an IPv4
// address as it is (an IPv4-mapped IPv6 address as IPv4), an IPv6 address
// as its /64 prefix ("2001:db8:1:2::/64": one host or network usually
// holds a whole /64, so its addresses share one bucket), anything else —
// [LocalSource], or LocalSource+":"+uid — as it is.
func SourceKey(source string) string {
	a, err := netip.ParseAddr(source)
	if err != nil {
		return source
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, err := a.WithZone("").Prefix(64)
	if err != nil {
		return source // unreachable: a valid IPv6 address has a /64
	}
	return p.String()
}

// isLocal reports whether source is a Unix socket connection.
func isLocal(source string) bool {
	return source == LocalSource || strings.HasPrefix(source, LocalSource+":")
}
