package outbox

import (
	"errors"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// Entry is an envelope in the outbox: sealed once, sent until acknowledged.
type Entry struct {
	Seq         uint64          // assigned by [Store.Add]: increasing, the send order
	ID          identity.UUID   // envelope id, the same on every attempt
	To          identity.PeerID // recipient
	Peer        string          // recipient's trust-list name when queued
	Kind        string          // message, request, response
	CorrID      identity.UUID   // in_reply_to of a response; zero otherwise
	Payload     []byte          // the sealed envelope's wire bytes (no length prefix)
	Created     time.Time       // when it was queued
	Expires     time.Time       // zero: no time-to-live
	Attempts    int             // failed attempts so far
	NextAttempt time.Time       // not before; zero: at once
	LastError   string          // why the last attempt failed
}

// DeadLetter is an entry that will not be sent again unless a person
// revives it.
type DeadLetter struct {
	Entry
	Reason string    // Reason* constants, with detail after ": "
	DiedAt time.Time // when it was moved here
}

// Reasons an entry becomes a dead letter (the prefix of DeadLetter.Reason).
const (
	ReasonExpired     = "expired"           // its time-to-live passed before an ack
	ReasonExhausted   = "retries_exhausted" // Options.MaxAttempts attempts failed
	ReasonUnknownPeer = "unknown_peer"      // the recipient is no longer trusted
	ReasonRejected    = "rejected"          // the envelope cannot be sent at all
	ReasonDeadline    = "deadline"          // a request's deadline passed before it was delivered
	ReasonCancelled   = "cancelled"         // a request was cancelled before it was delivered
	ReasonDropped     = "dropped"           // taken out of the queue by the user (meerkatd outbox drop)
)

// Breaker is a peer's circuit-breaker state, as stored.
type Breaker struct {
	Peer      identity.PeerID
	Failures  int       // consecutive failed attempt rounds
	OpenUntil time.Time // non-zero: open (no dialling) until then, then one probe
}

// Store keeps the outbox, dead letters and breaker states. A durable store
// ([store.Store] in the daemon) makes them survive restarts; [MemStore]
// keeps them in memory. Implementations are safe for concurrent use. They
// keep times as given, however far ahead: the [Outbox] bounds the ones it
// schedules by ([Bounds]).
type Store interface {
	// Add stores e, assigning its Seq, and returns it once it is
	// durable: from then on the envelope is never lost.
	Add(e Entry) (Entry, error)
	// Entries returns the whole outbox in Seq order.
	Entries() ([]Entry, error)
	// Delivered removes acknowledged entries. It need not be durable when
	// it returns: a removal lost in a crash only means one more delivery,
	// which the receiver recognises as a duplicate.
	Delivered(ids ...identity.UUID) error
	// Attempted records a failed attempt of entry id.
	Attempted(id identity.UUID, attempts int, next time.Time, lastErr string) error
	// Kill moves entry id from the outbox to the dead letters.
	Kill(id identity.UUID, reason string, at time.Time) error
	// DeadLetters returns the dead letters, oldest first.
	DeadLetters() ([]DeadLetter, error)
	// Revive moves dead letters back to the end of the outbox with their
	// attempts cleared (and no time-to-live); no ids means all of them.
	// It returns the revived entries with their new Seq.
	Revive(ids ...identity.UUID) ([]Entry, error)
	// Drop deletes the given dead letters for good and reports how many
	// it found; no ids deletes nothing.
	Drop(ids ...identity.UUID) (int, error)
	// Prune deletes the dead letters that died before before (zero: no
	// age limit) and, of the others, all but the max newest (max < 0: no
	// count limit), and returns them oldest first.
	Prune(max int, before time.Time) ([]DeadLetter, error)
	// Breakers returns the stored breaker states.
	Breakers() ([]Breaker, error)
	// SaveBreaker stores b; a closed breaker (no failures, not open) may
	// be deleted.
	SaveBreaker(b Breaker) error
}

// ErrNotFound is returned by Kill for an id that is not in the outbox.
var ErrNotFound = errors.New("outbox: no such entry")

// ErrQueued is Store.Add's error for an envelope id already in the
// outbox: the same call made again (an idempotency key retried after a
// crash) finds its envelope queued from the first time.
var ErrQueued = errors.New("outbox: already queued")
