package natsrelay

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meerkatd/meerkatd/identity"
)

// A reliable send whose envelope the stream stored stays in its outbox
// until the recipient's signed ack comes, and is attempted again every
// 30 seconds meanwhile (outbox.DefaultStoredRecheck). The stream drops
// a repeat within its duplicate window only: published again after it,
// the envelope would be stored once more, a copy per window for as long
// as the recipient is away, until the stream is full for everyone. So a
// repeat of an envelope this relay stored lately is published only once
// the stream holds nothing for its recipient: then the envelope was read
// (and the ack may have been lost: the stream was full, say) or lost
// with the stream, and a repeat is what delivers it or brings its ack.

// maxRecentIDs bounds each of the two sets recentIDs keeps: past it, the
// older set is forgotten, and a repeat of what it held is published as
// before (a copy, at worst).
const maxRecentIDs = 1 << 16

// recentIDs is a bounded set of envelope ids: the newer set and the one
// before it.
type recentIDs struct {
	mu        sync.Mutex
	cur, prev map[identity.UUID]struct{}
}

func (r *recentIDs) add(id identity.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cur) >= maxRecentIDs {
		r.prev, r.cur = r.cur, nil
	}
	if r.cur == nil {
		r.cur = map[identity.UUID]struct{}{}
	}
	r.cur[id] = struct{}{}
}

func (r *recentIDs) has(id identity.UUID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, inCur := r.cur[id]
	_, inPrev := r.prev[id]
	return inCur || inPrev
}

// forget empties the set: the stream was made again, and what it held
// is gone.
func (r *recentIDs) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur, r.prev = nil, nil
}

// subjectCount is how many messages the stream held for a subject, and
// when the stream said so.
type subjectCount struct {
	n  uint64
	at time.Time
}

// pendingFresh is how long a subject's count is taken as it was: one
// question to the server per recipient per round of rechecks.
var pendingFresh = 5 * time.Second // a variable for tests

// maxPendingSubjects bounds the subjects whose counts are kept.
const maxPendingSubjects = 4096

// storedStill reports whether the stream holds messages for subject (a
// recipient's): then an envelope stored for it waits there still. It
// asks the stream (its info, which a least-privilege user may read) at
// most once per pendingFresh per subject; an error reports false, so
// the envelope is published again, as it always was.
func (rl *Relay) storedStill(ctx context.Context, subject string) bool {
	now := time.Now()
	rl.pendMu.Lock()
	c, ok := rl.pending[subject]
	rl.pendMu.Unlock()
	if ok && now.Sub(c.at) < pendingFresh {
		return c.n > 0
	}
	stream, err := rl.js.Stream(ctx, rl.opts.Stream)
	if err != nil {
		return false
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return false
	}
	n := info.State.Subjects[subject]
	rl.pendMu.Lock()
	if rl.pending == nil || len(rl.pending) >= maxPendingSubjects {
		rl.pending = map[string]subjectCount{}
	}
	rl.pending[subject] = subjectCount{n: n, at: now}
	rl.pendMu.Unlock()
	return n > 0
}
