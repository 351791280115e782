package space

import (
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// tokenBucket limits the system/error answers one sender gets in one
// space, so that two nodes refusing each other cannot start a storm: up
// to errorBurst answers at once, then one per errorRefill. Its zero value
// is an empty bucket; newBucket returns a full one.
type tokenBucket struct {
	tokens float64
	last   time.Time
}

func newBucket(now time.Time) *tokenBucket {
	return &tokenBucket{tokens: errorBurst, last: now}
}

// refill adds the tokens earned since the last call, up to errorBurst.
func (b *tokenBucket) refill(now time.Time) {
	if now.After(b.last) {
		b.tokens += float64(now.Sub(b.last)) / float64(errorRefill)
		if b.tokens > errorBurst {
			b.tokens = errorBurst
		}
	}
	b.last = now
}

// take takes one token if there is one.
func (b *tokenBucket) take(now time.Time) bool {
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// full reports whether the bucket is back to errorBurst (it can be
// forgotten: a new bucket would be the same).
func (b *tokenBucket) full(now time.Time) bool {
	b.refill(now)
	return b.tokens >= errorBurst
}

// allowErrorLocked takes a token from the bucket of (space, from). The
// map of buckets is bounded: when it is full, buckets that refilled are
// forgotten, and if none has, the answer is not sent (refusals still are
// observed and counted).
func (e *Engine) allowErrorLocked(space string, from identity.PeerID, now time.Time) bool {
	k := limiterKey{space, from}
	b := e.limiters[k]
	if b == nil {
		if len(e.limiters) >= maxLimiters {
			for k2, b2 := range e.limiters {
				if b2.full(now) {
					delete(e.limiters, k2)
				}
			}
			if len(e.limiters) >= maxLimiters {
				return false
			}
		}
		b = newBucket(now)
		e.limiters[k] = b
	}
	return b.take(now)
}
