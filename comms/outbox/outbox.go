package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// Attempt is one try at delivering an entry.
type Attempt struct {
	To      identity.PeerID
	ID      identity.UUID
	Kind    string // the entry's kind type (message, request, response, meup, …)
	Payload []byte
	WantAck bool // false for kinds that are not acknowledged (responses)
	// Queued is called by the Deliverer once the envelope is queued on
	// a connection (not if the attempt fails before that). The worker
	// starts the next attempt only then; an attempt that ends without
	// being queued stops the round, so nothing overtakes it.
	Queued func()
}

// Deliverer makes delivery attempts; the daemon's is its comms.Router.
type Deliverer interface {
	// Deliver returns nil once the peer acknowledged the envelope (or it
	// was written, if !WantAck). An error wrapping [ErrPermanent] makes
	// the entry a dead letter at once; any other error is retried.
	Deliver(ctx context.Context, a Attempt) error
}

// ErrPermanent marks delivery errors that retrying cannot fix (the peer is
// no longer trusted). Wrap it with [Permanent].
var ErrPermanent = errors.New("outbox: permanent failure")

// PermanentError is a delivery failure that retrying cannot fix.
type PermanentError struct {
	Reason string // a Reason… constant
	Err    error
}

func (e *PermanentError) Error() string        { return e.Err.Error() }
func (e *PermanentError) Unwrap() error        { return e.Err }
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// Permanent wraps err as a [*PermanentError] with reason.
func Permanent(reason string, err error) error { return &PermanentError{Reason: reason, Err: err} }

// ErrStored marks an attempt whose envelope a store-and-forward broker on
// the way has stored, but whose recipient has not acknowledged it yet
// (NATS JetStream). It is not a failure: the entry stays queued and is
// attempted again later (where the recipient's ack, if it came meanwhile,
// completes it at once), and the envelopes behind it go on without
// waiting, since the broker keeps them in order.
var ErrStored = errors.New("outbox: stored by the broker, not acknowledged yet")

// ErrLocal marks an attempt that failed on this node's side of the way
// (its connection to a broker down, reconnecting): not the peer's
// failure. It counts as an attempt, with its backoff, but leaves the
// peer's breaker alone, as a host name that does not resolve does.
var ErrLocal = errors.New("outbox: this node's way to the peer is down")

// DefaultStoredRecheck is how long an entry whose envelope the broker
// stored waits before its next attempt.
const DefaultStoredRecheck = 30 * time.Second

// Errors returned by Enqueue.
var (
	ErrFull   = errors.New("outbox: full")
	ErrClosed = errors.New("outbox: closed")
)

// Defaults for [Options].
var (
	DefaultBackoff = []time.Duration{0, 5 * time.Second, 15 * time.Second, time.Minute, 5 * time.Minute}
	// DefaultResolveBackoff is the schedule after attempts whose peer's
	// host name did not resolve: a name is fixed (DNS, /etc/hosts, the
	// trust list) on a scale of minutes, not seconds.
	DefaultResolveBackoff = []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute}
)

const (
	DefaultMaxAttempts     = 50
	DefaultBreakerFailures = 3
	DefaultBreakerOpen     = time.Minute
	DefaultWindow          = 128
	DefaultMaxEntries      = 10000
	DefaultMaxBytes        = 256 << 20
	DefaultMaxDeadLetters  = 10000
	DefaultDeadLetterAge   = 30 * 24 * time.Hour
	// DefaultMaxTTL bounds stored expiries (see [Bounds]): one week, the
	// longest time-to-live meerkatd lets a send have.
	DefaultMaxTTL = 7 * 24 * time.Hour
)

// Options are an Outbox's knobs; zero values mean the defaults.
type Options struct {
	// Backoff[i] is the wait after an envelope's (i+1)-th failed attempt;
	// the last one repeats.
	Backoff []time.Duration
	// ResolveBackoff[i] replaces Backoff after a failed attempt whose
	// peer's host name did not resolve (a *net.DNSError), counted over
	// such failures in a row; these do not count against the breaker:
	// the peer may be up, its name is wrong or not published yet.
	ResolveBackoff  []time.Duration
	MaxAttempts     int           // failed attempts before an envelope is a dead letter
	BreakerFailures int           // consecutive failed rounds that open a peer's breaker
	BreakerOpen     time.Duration // how long an open breaker stays open before its probe
	Window          int           // envelopes in flight per peer
	StoredRecheck   time.Duration // wait before attempting again an entry a broker stored (ErrStored)
	MaxEntries      int           // envelopes queued at most (all peers)
	MaxBytes        int64         // payload bytes queued at most (all peers)
	// MaxDeadLetters and DeadLetterAge bound the dead letters kept: Prune
	// removes the oldest beyond the count and those that died longer ago.
	MaxDeadLetters int
	DeadLetterAge  time.Duration
	// MaxTTL is the longest time-to-live an entry can have: an expiry
	// further from now than this (written while the clock was wrong) is
	// brought back to now+MaxTTL. See [Bounds].
	MaxTTL  time.Duration
	Observe func(Event) // told about every attempt's outcome; must not block
	// OnBreaker is told about every change of a peer's circuit breaker
	// (for logs). Like Observe it is called with the Outbox's lock held:
	// it must not block nor call the Outbox.
	OnBreaker func(BreakerEvent)
	Logger    *slog.Logger
	Now       func() time.Time
}

func (o *Options) setDefaults() {
	if len(o.Backoff) == 0 {
		o.Backoff = DefaultBackoff
	}
	if len(o.ResolveBackoff) == 0 {
		o.ResolveBackoff = DefaultResolveBackoff
	}
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&o.MaxAttempts, DefaultMaxAttempts)
	def(&o.BreakerFailures, DefaultBreakerFailures)
	def(&o.Window, DefaultWindow)
	if o.StoredRecheck <= 0 {
		o.StoredRecheck = DefaultStoredRecheck
	}
	def(&o.MaxEntries, DefaultMaxEntries)
	def(&o.MaxDeadLetters, DefaultMaxDeadLetters)
	if o.DeadLetterAge <= 0 {
		o.DeadLetterAge = DefaultDeadLetterAge
	}
	if o.BreakerOpen <= 0 {
		o.BreakerOpen = DefaultBreakerOpen
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxTTL <= 0 {
		o.MaxTTL = DefaultMaxTTL
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Event types reported to Options.Observe.
const (
	EventSent       = "sent"        // an attempt's envelope is on its way
	EventAcked      = "acked"       // the peer acknowledged it (or it was written, for responses)
	EventRetry      = "retry"       // an attempt failed; it will be retried
	EventStored     = "stored"      // a broker on the way stored it; the recipient's ack is awaited
	EventExpired    = "expired"     // its time-to-live passed: now a dead letter
	EventDeadLetter = "dead_letter" // moved to the dead letters for another reason
	// EventDroppedDeadLetter: Prune removed a dead letter for good; the
	// Reason is PruneCap or PruneAge, then ": " and its DeadLetter.Reason.
	EventDroppedDeadLetter = "dropped_dead_letter"
)

// Why Prune removed a dead letter (the prefix of its event's Reason).
const (
	PruneCap = "cap"       // more than Options.MaxDeadLetters newer ones
	PruneAge = "retention" // died more than Options.DeadLetterAge ago
)

// Event is one step in an entry's life, for an audit log.
type Event struct {
	Type    string
	Entry   Entry // Payload included; the observer decides whether to keep it
	Attempt int   // 1-based attempt number (sent, acked, retry)
	Reason  string
	Err     error // retry: the attempt's error (Reason is its text)
	// Stored, on an expired event: a broker on the way holds the
	// envelope ([ErrStored]) and may still deliver it.
	Stored bool
}

// BreakerEvent is a change of one peer's circuit breaker, reported to
// Options.OnBreaker.
type BreakerEvent struct {
	Peer identity.PeerID
	Name string // the peer's trust-list name when its envelopes were queued
	// State is what the breaker became: BreakerOpen (the peer failed
	// BreakerFailures rounds in a row, or its probe failed),
	// BreakerHalfOpen (the probe is starting) or BreakerClosed (the peer
	// acknowledged an envelope after failed attempts: it recovered).
	State    string
	Failures int       // consecutive failed rounds; for BreakerClosed, those before the ack
	Until    time.Time // BreakerOpen: when the probe may start
	Waiting  int       // envelopes queued for the peer, the acknowledged one left out
	WasOpen  bool      // BreakerClosed: the breaker had opened (not merely counted failures)
}

// Breaker states as [PeerState] shows them.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open" // open time over: the next attempt is the probe
)

// PeerState is one peer's view of the outbox.
type PeerState struct {
	Peer        identity.PeerID
	Name        string
	Queued      int
	InFlight    int
	Stored      int // of Queued, held by a broker on the way (they hold nothing back)
	Breaker     string
	Failures    int
	OpenUntil   time.Time // when an open breaker allows its probe
	NextAttempt time.Time // of the oldest queued envelope; zero: now
	LastError   string
}

// Outbox is the reliable-send queue. Create it with [New], start it with
// [Outbox.Start], stop it with [Outbox.Close].
type Outbox struct {
	st     Store
	d      Deliverer
	opts   Options
	bounds Bounds // of opts
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	parked func(identity.PeerID) // test hook: a worker is about to wait

	mu      sync.Mutex // guards the fields below
	started bool
	closed  bool
	peers   map[identity.PeerID]*peerQ
	entries int
	bytes   int64
}

type peerQ struct {
	id       identity.PeerID
	name     string
	items    []*item // Seq order
	breaker  Breaker
	wake     chan struct{} // cap 1
	running  bool
	inFlight int
	lastErr  string
	resolve  int // attempts in a row whose peer's host name did not resolve
	stored   int // items a broker holds (item.stored)
}

type item struct {
	e        Entry
	inFlight bool
	// stored: a broker holds this envelope, in order; until its next
	// attempt it does not hold back what is behind it.
	stored bool
	// killFailed: the store failed to move it to the dead letters; it is
	// tried again at its next attempt's time, not before.
	killFailed bool
	t          *Ticket // nil for entries loaded from the store
	// loaded: the entry came from the store at start and has not been
	// attempted in this process. Its first attempt here is recorded as
	// made before it starts (precounted), so that a process that dies
	// during it, again and again, still runs the entry out of attempts.
	loaded, precounted bool
	// probe: the attempt under way is an open breaker's probe made before
	// the envelope's own next attempt (dueAt). It tells whether the peer
	// is back; failed, it leaves the envelope's attempts and next attempt
	// as they were, so that a peer down for long runs its envelopes out
	// of attempts on their own schedule, not one probe a breaker period.
	probe bool
}

// stoppedDuring is the last error of an entry whose attempt was under way
// when the process stopped without settling it.
const stoppedDuring = "meerkatd stopped during this attempt (a crash, or the machine went down): counted as failed"

// Ticket follows one enqueued envelope in this process.
type Ticket struct {
	once      sync.Once
	done      chan struct{}
	attempted chan struct{}
	aOnce     sync.Once
	mu        sync.Mutex
	err       error
	lastErr   string
	stored    bool
}

func newTicket() *Ticket {
	return &Ticket{done: make(chan struct{}), attempted: make(chan struct{})}
}

// Done is closed once the envelope was acknowledged or became a dead
// letter ([Ticket.Err] tells which).
func (t *Ticket) Done() <-chan struct{} { return t.done }

// Attempted is closed once the first attempt ended, either way: acked,
// failed, or stored by a broker on the way ([Ticket.Stored]).
func (t *Ticket) Attempted() <-chan struct{} { return t.attempted }

// Err is nil while pending or once acknowledged, and a *DeadError once the
// envelope became a dead letter.
func (t *Ticket) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// LastError is why the last attempt failed ("" if none did).
func (t *Ticket) LastError() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

// Stored reports whether an attempt ended with the envelope stored by a
// broker on the way ([ErrStored]): not delivered yet, and not failed.
func (t *Ticket) Stored() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stored
}

// attemptEnded ends an attempt that failed with errText ("": none), or
// whose envelope a broker stored.
func (t *Ticket) attemptEnded(errText string, stored bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	if errText != "" {
		t.lastErr = errText
	}
	t.stored = t.stored || stored
	t.mu.Unlock()
	t.aOnce.Do(func() { close(t.attempted) })
}

func (t *Ticket) finish(err error) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.err = err
	t.mu.Unlock()
	// done before attempted: whoever wakes on Attempted must find Done
	// closed if the envelope was acknowledged.
	t.once.Do(func() { close(t.done) })
	t.aOnce.Do(func() { close(t.attempted) })
}

// DeadError is a Ticket's error for an envelope that became a dead letter.
type DeadError struct{ Reason string }

func (e *DeadError) Error() string { return "outbox: dead letter: " + e.Reason }

// New loads the outbox and breaker states from st. Stored times further
// ahead than the policy allows (see [Bounds]) are brought back within it.
func New(st Store, d Deliverer, opts Options) (*Outbox, error) {
	opts.setDefaults()
	o := &Outbox{st: st, d: d, opts: opts, bounds: opts.bounds(), log: opts.Logger, peers: map[identity.PeerID]*peerQ{}}
	o.ctx, o.cancel = context.WithCancel(context.Background())
	now := opts.Now()
	var ahead int // stored times beyond their bound: the clock was wrong when they were written
	bs, err := st.Breakers()
	if err != nil {
		return nil, fmt.Errorf("outbox: load breakers: %w", err)
	}
	for _, b := range bs {
		bb := o.bounds.Breaker(b, now)
		if b.OpenUntil.After(bb.OpenUntil) {
			ahead++
		}
		o.peer(b.Peer, "").breaker = bb
	}
	es, err := st.Entries()
	if err != nil {
		return nil, fmt.Errorf("outbox: load entries: %w", err)
	}
	for _, e := range es {
		be := o.bounds.Entry(e, now)
		if e.NextAttempt.After(be.NextAttempt) || e.Expires.After(be.Expires) {
			ahead++
		}
		q := o.peer(e.To, e.Peer)
		q.items = append(q.items, &item{e: be, loaded: true})
		o.entries++
		o.bytes += int64(len(e.Payload))
	}
	if ahead > 0 {
		o.log.Warn("outbox: stored times too far ahead (was the clock wrong?); brought within the retry policy",
			"count", ahead, "max_wait", o.bounds.Wait.String(), "breaker_open", o.bounds.Open.String(), "max_ttl", o.bounds.TTL.String())
	}
	for _, q := range o.peers {
		slices.SortFunc(q.items, func(a, b *item) int { return cmp.Compare(a.e.Seq, b.e.Seq) })
	}
	return o, nil
}

// peer returns id's queue, creating it; o.mu held (or not yet shared).
func (o *Outbox) peer(id identity.PeerID, name string) *peerQ {
	q := o.peers[id]
	if q == nil {
		q = &peerQ{id: id, wake: make(chan struct{}, 1)}
		o.peers[id] = q
	}
	if name != "" {
		q.name = name
	}
	return q
}

// Start begins delivering what is queued, including entries loaded from
// the store.
func (o *Outbox) Start() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.started || o.closed {
		return
	}
	o.started = true
	for _, q := range o.peers {
		o.runLocked(q)
	}
}

// runLocked starts q's worker if it has work and none runs; o.mu held.
func (o *Outbox) runLocked(q *peerQ) {
	if !o.started || o.closed || q.running || len(q.items) == 0 {
		return
	}
	q.running = true
	o.wg.Add(1)
	go o.work(q)
}

// Close stops the workers, cancelling attempts in flight (their entries
// stay queued in the store) and waits for them.
func (o *Outbox) Close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.cancel()
	o.wg.Wait()
}

// Enqueue stores e (Seq, Created and Attempts are set here) and queues it
// for delivery. It returns once the store has it; the Ticket follows its
// delivery.
func (o *Outbox) Enqueue(e Entry) (Entry, *Ticket, error) {
	switch {
	case e.To.IsZero():
		return e, nil, errors.New("outbox: entry has no recipient")
	case e.ID.IsZero():
		return e, nil, errors.New("outbox: entry has no id")
	case len(e.Payload) == 0:
		return e, nil, errors.New("outbox: entry has no payload")
	}
	e.Seq, e.Attempts, e.NextAttempt, e.LastError = 0, 0, time.Time{}, ""
	if e.Created.IsZero() {
		e.Created = o.opts.Now()
	}
	size := int64(len(e.Payload))
	o.mu.Lock()
	switch {
	case o.closed:
		o.mu.Unlock()
		return e, nil, ErrClosed
	case o.entries+1 > o.opts.MaxEntries:
		o.mu.Unlock()
		return e, nil, fmt.Errorf("%w: %d envelopes queued (limit %d)", ErrFull, o.entries, o.opts.MaxEntries)
	case o.bytes+size > o.opts.MaxBytes:
		o.mu.Unlock()
		return e, nil, fmt.Errorf("%w: %d bytes queued (limit %d)", ErrFull, o.bytes, o.opts.MaxBytes)
	}
	o.entries++
	o.bytes += size
	o.mu.Unlock()

	stored, err := o.st.Add(e)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.entries--
		o.bytes -= size
		return e, nil, fmt.Errorf("outbox: store: %w", err)
	}
	t := newTicket()
	o.queueLocked(&item{e: stored, t: t})
	return stored, t, nil
}

// queueLocked puts it in its peer's queue in Seq order (concurrent
// enqueues and revivals may finish out of order) and starts the worker.
func (o *Outbox) queueLocked(it *item) {
	q := o.peer(it.e.To, it.e.Peer)
	i := len(q.items)
	for i > 0 && q.items[i-1].e.Seq > it.e.Seq {
		i--
	}
	q.items = slices.Insert(q.items, i, it)
	o.runLocked(q)
	wake(q)
}

func wake(q *peerQ) {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// result is the outcome of one attempt.
type result struct {
	it  *item
	err error
}

// work is q's worker: it runs until q is empty or the Outbox closes.
func (o *Outbox) work(q *peerQ) {
	defer o.wg.Done()
	results := make(chan result, o.opts.Window)
	var delivered []identity.UUID
	// A round is what is sent between two moments with nothing in
	// flight. Once an attempt in it fails, the round is halted (nothing
	// new starts until the attempts in flight end) and it counts as one
	// failure against the breaker.
	var rs round
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		o.mu.Lock()
		now := o.opts.Now()
		if q.inFlight == 0 {
			rs = round{}
			o.expireLocked(q, now)
		}
		for !rs.halted && o.ctx.Err() == nil {
			it, ok := o.nextLocked(q, now)
			if !ok {
				break
			}
			if it.loaded && it.e.Attempts > o.opts.MaxAttempts {
				// Its attempts ran out before this process started: a
				// process stopped during its last one (countStart), and
				// during the one more it was given (at exactly
				// MaxAttempts, the attempt under way may have been
				// acknowledged with its removal lost in the stop: that
				// one more tells).
				o.killLocked(q, it, fmt.Sprintf("%s: %d attempts failed; last: %s", ReasonExhausted, it.e.Attempts, it.e.LastError), EventDeadLetter, now)
				continue
			}
			if !q.breaker.OpenUntil.IsZero() {
				o.breakerEventLocked(q, BreakerHalfOpen)
			}
			it.inFlight = true
			it.probe = now.Before(it.e.NextAttempt)
			q.inFlight++
			pre, first := it.e, it.loaded
			it.loaded, it.precounted = false, first
			o.mu.Unlock()
			if first {
				o.countStart(pre)
			}
			if !o.launch(it, results) {
				rs.halted = true // it failed before it was queued: start nothing behind it
			}
			o.mu.Lock()
		}
		if q.inFlight == 0 && (len(q.items) == 0 || o.ctx.Err() != nil) {
			q.running = false
			o.mu.Unlock()
			o.flushDelivered(&delivered)
			return
		}
		var wait <-chan time.Time
		if q.inFlight == 0 {
			d := o.dueLocked(q, now).Sub(now)
			timer.Reset(max(d, 0))
			wait = timer.C
		}
		o.mu.Unlock()
		if o.parked != nil {
			o.parked(q.id)
		}

		select {
		case r := <-results:
			o.settle(q, r, &rs, &delivered)
			// Settle everything else that is ready before deciding.
		drain:
			for {
				select {
				case r := <-results:
					o.settle(q, r, &rs, &delivered)
				default:
					break drain
				}
			}
			if len(results) == 0 {
				o.flushDelivered(&delivered)
			}
		case <-q.wake:
		case <-wait:
		case <-o.ctx.Done():
			// Attempts in flight end with the context; wait for them.
			o.mu.Lock()
			n := q.inFlight
			o.mu.Unlock()
			for ; n > 0; n-- {
				o.settle(q, <-results, &rs, &delivered)
			}
		}
		if wait != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// nextLocked returns the next envelope to start, if one may start now.
func (o *Outbox) nextLocked(q *peerQ, now time.Time) (*item, bool) {
	window := o.opts.Window
	o.boundBreakerLocked(q, now)
	if b := q.breaker; !b.OpenUntil.IsZero() {
		if now.Before(b.OpenUntil) {
			return nil, false // open: queue, do not dial
		}
		window = 1 // half-open: one probe
	}
	if q.inFlight >= window {
		return nil, false
	}
	for i := 0; i < len(q.items); i++ {
		it := q.items[i]
		if it.inFlight {
			continue
		}
		o.boundLocked(it, now)
		if !it.e.Expires.IsZero() && !now.Before(it.e.Expires) {
			// Expired: to the dead letters. If the store fails, it stays
			// where it is and holds back what is behind it (order).
			if it.killFailed && now.Before(it.e.NextAttempt) || !o.expireOneLocked(q, it, now) {
				return nil, false
			}
			i--
			continue
		}
		if now.Before(it.dueAt(q.breaker.OpenUntil)) {
			if it.stored {
				continue // in the broker already, in order: the next may go
			}
			return nil, false // the oldest waits, so everything behind it does
		}
		return it, true
	}
	return nil, false
}

// dueAt is when it may next be attempted: its next attempt, or, when its
// peer's breaker allows a probe at probe (not zero) before that, then. The
// breaker's open time is the wait between rounds that failed; the
// envelope's own backoff, which grew while the breaker counted them, does
// not delay the probe. An envelope in the broker already, or whose move
// to the dead letters failed, keeps its time.
func (it *item) dueAt(probe time.Time) time.Time {
	if !probe.IsZero() && probe.Before(it.e.NextAttempt) && !it.stored && !it.killFailed {
		return probe
	}
	return it.e.NextAttempt
}

// dueLocked is when q's worker should next look: the oldest envelope's
// next attempt (not before the breaker's probe) or the earliest expiry.
func (o *Outbox) dueLocked(q *peerQ, now time.Time) time.Time {
	var due time.Time
	o.boundBreakerLocked(q, now)
	for _, it := range q.items { // the first that holds the queue back, or a stored one before it
		if it.inFlight {
			continue
		}
		o.boundLocked(it, now)
		if next := it.dueAt(q.breaker.OpenUntil); due.IsZero() || next.Before(due) {
			due = next
		}
		if !it.stored {
			break
		}
	}
	if q.breaker.OpenUntil.After(due) {
		due = q.breaker.OpenUntil
	}
	for _, it := range q.items {
		if it.inFlight || it.e.Expires.IsZero() {
			continue
		}
		o.boundLocked(it, now)
		t := it.e.Expires
		if !now.Before(t) && it.killFailed {
			t = it.e.NextAttempt // expired, but the store refused to move it: try again then
		}
		if t.Before(due) {
			due = t
		}
	}
	return due
}

// countStart records e's attempt about to start as made, and failed
// with stoppedDuring, with the next attempt after its backoff: what the
// store keeps if the process stops before the attempt settles. settle
// writes the real outcome, or puts the entry back as it was when the
// attempt did not count (a shutdown, a broker that stored it).
func (o *Outbox) countStart(e Entry) {
	attempt := attemptNumber(e.Attempts)
	if err := o.st.Attempted(e.ID, attempt, o.opts.Now().Add(o.backoff(attempt)), stoppedDuring); err != nil {
		o.log.Error("outbox: cannot record an attempt before it starts", "id", e.ID.String(), "err", err)
	}
}

// attemptNumber is the number of the attempt after attempts made: 1 for
// a count from elsewhere (a store, a hand edit) below zero, the largest
// int past it.
func attemptNumber(attempts int) int {
	switch n := attempts + 1; {
	case attempts < 0:
		return 1
	case n < 1:
		return math.MaxInt
	default:
		return n
	}
}

// launch starts one attempt and returns once its envelope is queued on
// the connection (true) or the attempt ended before that (false).
func (o *Outbox) launch(it *item, results chan<- result) bool {
	queued := make(chan struct{})
	finished := make(chan struct{})
	a := Attempt{To: it.e.To, ID: it.e.ID, Kind: it.e.Kind, Payload: it.e.Payload, WantAck: it.e.Kind != "response",
		Queued: sync.OnceFunc(func() { close(queued) })}
	o.observe(EventSent, it.e, it.e.Attempts+1, "")
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		err := o.d.Deliver(o.ctx, a)
		close(finished)
		results <- result{it, err}
	}()
	select {
	case <-queued:
		return true
	case <-finished:
		select {
		case <-queued:
			return true
		default:
			return false
		}
	}
}

// round is the state of the attempts sent since the queue last had
// nothing in flight.
type round struct {
	halted bool // start nothing new
	failed bool // counted against the breaker
}

// settle applies one attempt's outcome.
func (o *Outbox) settle(q *peerQ, r result, rs *round, delivered *[]identity.UUID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	it := r.it
	it.inFlight = false
	q.inFlight--
	now := o.opts.Now()
	attempt := attemptNumber(it.e.Attempts)
	precounted, probe := it.precounted, it.probe
	it.precounted, it.probe = false, false
	switch {
	case r.err == nil:
		q.resolve = 0
		o.removeLocked(q, it)
		*delivered = append(*delivered, it.e.ID)
		q.lastErr = ""
		if q.breaker.Failures > 0 || !q.breaker.OpenUntil.IsZero() {
			was := q.breaker
			q.breaker = Breaker{Peer: q.id}
			o.saveBreakerLocked(q)
			if o.opts.OnBreaker != nil {
				o.opts.OnBreaker(BreakerEvent{Peer: q.id, Name: q.name, State: BreakerClosed, Failures: was.Failures,
					Waiting: len(q.items), WasOpen: !was.OpenUntil.IsZero()})
			}
		}
		o.observe(EventAcked, it.e, attempt, "")
		it.t.finish(nil)
	case o.ctx.Err() != nil:
		// Shutting down: not a failure; the entry stays in the store, as
		// it was before this attempt.
		if precounted {
			o.uncountLocked(it)
		}
	case errors.Is(r.err, ErrStored):
		// Not a failure, and nothing behind it waits for it.
		if !it.stored {
			it.stored = true
			q.stored++
		}
		it.e.NextAttempt = now.Add(o.opts.StoredRecheck)
		q.lastErr = ""
		// The attempt did not fail: what an earlier one said is no
		// reason of this entry's wait any more.
		cleared := it.e.LastError != ""
		it.e.LastError = ""
		if precounted || cleared {
			o.uncountLocked(it) // the entry as it is now, uncounted
		}
		o.observe(EventStored, it.e, attempt, "")
		it.t.attemptEnded("", true) // a send waiting for the first attempt goes on
	case errors.Is(r.err, ErrPermanent):
		reason := ReasonRejected
		var pe *PermanentError
		if errors.As(r.err, &pe) && pe.Reason != "" {
			reason = pe.Reason
		}
		if reason == ReasonUnknownPeer {
			// Refused here (the peer is no longer trusted): nothing went
			// out, no attempt to count.
			if precounted {
				o.uncountLocked(it)
			}
		} else {
			// The peer refused it: the dead letter counts this attempt, as
			// one of retries_exhausted does (a record countStart wrote is
			// replaced).
			it.e.Attempts, it.e.LastError = attempt, r.err.Error()
			if err := o.st.Attempted(it.e.ID, it.e.Attempts, it.e.NextAttempt, it.e.LastError); err != nil {
				o.log.Error("outbox: cannot record a failed attempt", "id", it.e.ID.String(), "err", err)
			}
		}
		o.killLocked(q, it, reason+": "+r.err.Error(), EventDeadLetter, now)
	default:
		msg := r.err.Error()
		var dnsErr *net.DNSError
		resolveFailed := errors.As(r.err, &dnsErr) && !dnsErr.IsTimeout
		if resolveFailed {
			msg = ResolveFailed + ": " + dnsErr.Error() // the lookup and its answer: not "connection refused"
		}
		if probe {
			attempt = it.e.Attempts // see item.probe: not counted
		}
		it.e.Attempts = attempt
		it.e.LastError = msg
		q.lastErr = msg
		it.t.attemptEnded(msg, false)
		rs.halted = true
		wait := o.backoff(attempt)
		if resolveFailed {
			// Not a down peer: its address has no host behind it now.
			// Its own, slower schedule, and the breaker is left alone.
			q.resolve++
			wait = o.opts.ResolveBackoff[min(q.resolve, len(o.opts.ResolveBackoff))-1]
			if q.resolve == 1 {
				o.log.Warn("outbox: the peer's host name does not resolve; retrying on the slower schedule", "peer", q.name, "host", dnsErr.Name, "next", wait.String())
			}
			if !q.breaker.OpenUntil.IsZero() {
				// A half-open breaker's probe that did not resolve: the
				// next probe waits for the resolve schedule too (its past
				// probe time would make every envelope due at once).
				q.breaker.OpenUntil = now.Add(wait)
			}
		} else if !rs.failed && !errors.Is(r.err, ErrLocal) {
			q.resolve = 0
			rs.failed = true
			o.breakerFailedLocked(q, now)
		}
		if attempt >= o.opts.MaxAttempts && !probe {
			// The dead letter keeps the count of attempts made, this one's too.
			if err := o.st.Attempted(it.e.ID, it.e.Attempts, it.e.NextAttempt, msg); err != nil {
				o.log.Error("outbox: cannot record a failed attempt", "id", it.e.ID.String(), "err", err)
			}
			o.killLocked(q, it, fmt.Sprintf("%s: %d attempts failed; last: %s", ReasonExhausted, attempt, msg), EventDeadLetter, now)
			return
		}
		if !probe {
			it.e.NextAttempt = now.Add(wait)
		}
		if err := o.st.Attempted(it.e.ID, it.e.Attempts, it.e.NextAttempt, msg); err != nil {
			o.log.Error("outbox: cannot record a failed attempt", "id", it.e.ID.String(), "err", err)
		}
		if o.opts.Observe != nil {
			o.opts.Observe(Event{Type: EventRetry, Entry: it.e, Attempt: attempt, Reason: msg, Err: r.err})
		}
	}
}

// uncountLocked puts back in the store what countStart wrote over: an
// attempt that did not count. o.mu held.
func (o *Outbox) uncountLocked(it *item) {
	if err := o.st.Attempted(it.e.ID, it.e.Attempts, it.e.NextAttempt, it.e.LastError); err != nil {
		o.log.Error("outbox: cannot record an attempt", "id", it.e.ID.String(), "err", err)
	}
}

// backoff is the wait after the n-th failed attempt.
func (o *Outbox) backoff(n int) time.Duration {
	b := o.opts.Backoff
	return b[min(max(n, 1), len(b))-1]
}

// breakerFailedLocked counts a failed round against q's breaker.
func (o *Outbox) breakerFailedLocked(q *peerQ, now time.Time) {
	b := &q.breaker
	b.Peer = q.id
	b.Failures++
	halfOpen := !b.OpenUntil.IsZero() // the probe failed
	if halfOpen || b.Failures >= o.opts.BreakerFailures {
		b.OpenUntil = now.Add(o.opts.BreakerOpen)
		if o.opts.OnBreaker == nil { // else its receiver logs it
			o.log.Warn("outbox: circuit open; queueing without dialling", "peer", q.name, "failures", b.Failures, "until", b.OpenUntil)
		}
		o.breakerEventLocked(q, BreakerOpen)
	}
	o.saveBreakerLocked(q)
}

// breakerEventLocked reports q's breaker, now in state, to OnBreaker.
func (o *Outbox) breakerEventLocked(q *peerQ, state string) {
	if o.opts.OnBreaker == nil {
		return
	}
	ev := BreakerEvent{Peer: q.id, Name: q.name, State: state, Failures: q.breaker.Failures, Waiting: len(q.items)}
	if state == BreakerOpen {
		ev.Until = q.breaker.OpenUntil
	}
	o.opts.OnBreaker(ev)
}

func (o *Outbox) saveBreakerLocked(q *peerQ) {
	if err := o.st.SaveBreaker(q.breaker); err != nil {
		o.log.Error("outbox: cannot store breaker state", "peer", q.name, "err", err)
	}
}

// killLocked moves it to the dead letters. If the store fails, it stays
// queued (it must not be lost) and is retried later. It reports whether
// it left the queue.
func (o *Outbox) killLocked(q *peerQ, it *item, reason, event string, now time.Time) bool {
	if err := o.st.Kill(it.e.ID, reason, now); err != nil && !errors.Is(err, ErrNotFound) {
		o.log.Error("outbox: cannot move an envelope to the dead letters; keeping it queued", "id", it.e.ID.String(), "err", err)
		it.e.NextAttempt = now.Add(o.backoff(len(o.opts.Backoff)))
		it.killFailed = true
		return false
	}
	o.removeLocked(q, it)
	if o.opts.Observe != nil {
		o.opts.Observe(Event{Type: event, Entry: it.e, Attempt: it.e.Attempts, Reason: reason, Stored: it.stored && event == EventExpired})
	}
	it.t.finish(&DeadError{Reason: reason})
	return true
}

// expireLocked dead-letters q's envelopes whose time-to-live has passed.
func (o *Outbox) expireLocked(q *peerQ, now time.Time) {
	for i := 0; i < len(q.items); i++ {
		it := q.items[i]
		if !it.inFlight {
			o.boundLocked(it, now)
		}
		if !it.inFlight && !it.e.Expires.IsZero() && !now.Before(it.e.Expires) &&
			!(it.killFailed && now.Before(it.e.NextAttempt)) && o.expireOneLocked(q, it, now) {
			i--
		}
	}
}

// expireOneLocked dead-letters it, whose time-to-live passed; it reports
// whether it left the queue (a store failure keeps it).
func (o *Outbox) expireOneLocked(q *peerQ, it *item, now time.Time) bool {
	reason := ReasonExpired
	switch {
	case it.stored:
		// Not retracted: the broker delivers it when the peer is back,
		// and its ack then lifts the dead letter (the node's LateAck).
		reason += ": " + ExpiredStored
	case it.e.LastError != "":
		reason += ": last attempt: " + it.e.LastError
	}
	return o.killLocked(q, it, reason, EventExpired, now)
}

// ExpiredStored is the detail of the reason of an envelope whose
// time-to-live passed while a broker on the way held it.
const ExpiredStored = "no ack came in time, but a broker on the way holds it and may still deliver it"

func (o *Outbox) removeLocked(q *peerQ, it *item) {
	if i := slices.Index(q.items, it); i >= 0 {
		q.items = slices.Delete(q.items, i, i+1)
		if it.stored {
			q.stored--
		}
		o.entries--
		o.bytes -= int64(len(it.e.Payload))
	}
}

func (o *Outbox) flushDelivered(ids *[]identity.UUID) {
	if len(*ids) == 0 {
		return
	}
	if err := o.st.Delivered(*ids...); err != nil {
		// They were acked; a lost removal only means one more delivery,
		// which the receiver recognises.
		o.log.Error("outbox: cannot remove delivered envelopes", "n", len(*ids), "err", err)
	}
	*ids = (*ids)[:0]
}

func (o *Outbox) observe(typ string, e Entry, attempt int, reason string) {
	if o.opts.Observe != nil {
		o.opts.Observe(Event{Type: typ, Entry: e, Attempt: attempt, Reason: reason})
	}
}

// Peers returns each peer's state: queue length, breaker, last error.
// Peers with nothing queued and a closed breaker are left out.
func (o *Outbox) Peers() []PeerState {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.opts.Now()
	var out []PeerState
	for _, q := range o.peers {
		if len(q.items) == 0 && q.breaker.OpenUntil.IsZero() {
			continue // nothing queued, breaker closed (failures may still count)
		}
		out = append(out, o.stateLocked(q, now))
	}
	slices.SortFunc(out, func(a, b PeerState) int { return cmp.Compare(a.Name+a.Peer.String(), b.Name+b.Peer.String()) })
	return out
}

// Peer returns id's state (closed and empty if it has none).
func (o *Outbox) Peer(id identity.PeerID) PeerState {
	o.mu.Lock()
	defer o.mu.Unlock()
	if q := o.peers[id]; q != nil {
		return o.stateLocked(q, o.opts.Now())
	}
	return PeerState{Peer: id, Breaker: BreakerClosed}
}

// stateLocked is q's state, its times bounded as the worker bounds them
// when it next looks.
func (o *Outbox) stateLocked(q *peerQ, now time.Time) PeerState {
	b := o.bounds.Breaker(q.breaker, now)
	s := PeerState{Peer: q.id, Name: q.name, Queued: len(q.items), InFlight: q.inFlight,
		Breaker: BreakerClosed, Failures: b.Failures, OpenUntil: b.OpenUntil, LastError: q.lastErr}
	if !b.OpenUntil.IsZero() {
		s.Breaker = BreakerOpen
		if !now.Before(b.OpenUntil) {
			s.Breaker = BreakerHalfOpen
		}
	}
	if len(q.items) > 0 {
		s.NextAttempt = o.bounds.Entry(q.items[0].e, now).NextAttempt
	}
	s.Stored = q.stored
	return s
}

// Queued is one envelope in the outbox as listings show it.
type Queued struct {
	Entry
	InFlight bool
	Stored   bool // a broker on the way holds it: it holds nothing behind it back
	Size     int  // the payload's length (List leaves the payload out)
}

// List returns the queued envelopes, per peer in send order, without
// payloads; their times are bounded (see [Bounds]).
func (o *Outbox) List() []Queued {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.opts.Now()
	var out []Queued
	for _, q := range o.peers {
		for _, it := range q.items {
			e := o.bounds.Entry(it.e, now)
			size := len(e.Payload)
			e.Payload = nil
			out = append(out, Queued{Entry: e, InFlight: it.inFlight, Stored: it.stored, Size: size})
		}
	}
	slices.SortFunc(out, func(a, b Queued) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// Len returns how many envelopes are queued.
func (o *Outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.entries
}

// DeadLetters lists the dead letters, oldest first.
func (o *Outbox) DeadLetters() ([]DeadLetter, error) { return o.st.DeadLetters() }

// Revive queues dead letters again (all of them if no ids are given) and
// returns how many it revived. It revives them in order while the outbox
// has room (Options.MaxEntries, Options.MaxBytes); the first that does
// not fit, and those after it, stay dead letters, and the error says so
// (ErrFull).
func (o *Outbox) Revive(ids ...identity.UUID) (int, error) {
	o.mu.Lock()
	closed := o.closed
	o.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	dead, err := o.st.DeadLetters()
	if err != nil {
		return 0, err
	}
	if len(ids) > 0 {
		byID := make(map[identity.UUID]DeadLetter, len(dead))
		for _, d := range dead {
			byID[d.ID] = d
		}
		dead = dead[:0]
		for _, id := range ids {
			if d, ok := byID[id]; ok {
				dead = append(dead, d)
				delete(byID, id) // an id given twice is revived once
			}
		}
	}
	// Room is reserved as Enqueue reserves it, then given back for what
	// the store did not revive.
	o.mu.Lock()
	fit := make([]identity.UUID, 0, len(dead))
	var size int64
	for _, d := range dead {
		n := int64(len(d.Payload))
		if o.entries+1 > o.opts.MaxEntries || o.bytes+n > o.opts.MaxBytes {
			break
		}
		o.entries++
		o.bytes += n
		size += n
		fit = append(fit, d.ID)
	}
	o.mu.Unlock()
	var es []Entry
	if len(fit) > 0 {
		es, err = o.st.Revive(fit...)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.entries -= len(fit)
	o.bytes -= size
	if err != nil {
		return 0, err
	}
	for _, e := range es {
		o.entries++
		o.bytes += int64(len(e.Payload))
		o.queueLocked(&item{e: e})
	}
	if left := len(dead) - len(fit); left > 0 {
		return len(es), fmt.Errorf("%w: %d revived, %d dead letters left as they are (at most %d envelopes and %d bytes queued)", ErrFull, len(es), left, o.opts.MaxEntries, o.opts.MaxBytes)
	}
	return len(es), nil
}

// Prune removes the dead letters that died more than
// Options.DeadLetterAge ago and, of the others, the oldest beyond
// Options.MaxDeadLetters, reporting each to Options.Observe
// (EventDroppedDeadLetter) for the audit log. It returns how many it
// removed. The owner calls it periodically; queued envelopes are never
// touched.
func (o *Outbox) Prune() (int, error) {
	cutoff := o.opts.Now().Add(-o.opts.DeadLetterAge)
	dead, err := o.st.Prune(o.opts.MaxDeadLetters, cutoff)
	for _, d := range dead {
		why := PruneCap
		if !d.DiedAt.IsZero() && d.DiedAt.Before(cutoff) {
			why = PruneAge
		}
		o.observe(EventDroppedDeadLetter, d.Entry, d.Attempts, why+": "+d.Reason)
	}
	return len(dead), err
}

// Drop deletes dead letters for good and returns how many it deleted.
func (o *Outbox) Drop(ids ...identity.UUID) (int, error) { return o.st.Drop(ids...) }

// Abandon moves peer's queued envelopes of the given kind that are not
// being attempted right now to the dead letters with reason (a Reason…
// constant, with detail after ": "), and reports how many it moved. The
// node uses it when a peer turns out not to take a kind at all.
func (o *Outbox) Abandon(peer identity.PeerID, kind, reason string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.peers[peer]
	if q == nil {
		return 0
	}
	now := o.opts.Now()
	n := 0
	for _, it := range slices.Clone(q.items) {
		if it.inFlight || it.e.Kind != kind {
			continue
		}
		if o.killLocked(q, it, reason, EventDeadLetter, now) {
			n++
		}
	}
	return n
}

// Withdraw moves peer's queued envelope id to the dead letters with
// reason (a Reason… constant, with detail after ": ") and reports whether
// it did: not when it is not queued, is being attempted right now (it may
// be delivered), or a broker holds it already (ErrStored: the broker
// delivers it). The node uses it for a request whose deadline passed, or
// that was cancelled, before it could be delivered.
func (o *Outbox) Withdraw(peer identity.PeerID, id identity.UUID, reason string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.peers[peer]
	if q == nil {
		return false
	}
	i := slices.IndexFunc(q.items, func(it *item) bool { return it.e.ID == id })
	if i < 0 || q.items[i].inFlight || q.items[i].stored {
		return false
	}
	return o.killLocked(q, q.items[i], reason, EventDeadLetter, o.opts.Now())
}

// DropQueued moves the queued envelopes with the given ids to the dead
// letters (ReasonDropped), wherever they wait: a user takes them out of
// the queue (one the peer will never take holds the rest of its queue
// back). It returns, by id, what it did with each it found: Dropped, or
// left as DropInFlight (being attempted right now: it may be delivered),
// DropStored (a broker on the way holds it and delivers it) or
// DropFailed (the store could not record the move). Ids not queued are
// not in the map.
func (o *Outbox) DropQueued(ids ...identity.UUID) map[identity.UUID]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	want := make(map[identity.UUID]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	out := map[identity.UUID]string{}
	now := o.opts.Now()
	for _, q := range o.peers {
		for _, it := range slices.Clone(q.items) {
			switch {
			case !want[it.e.ID]:
			case it.inFlight:
				out[it.e.ID] = DropInFlight
			case it.stored:
				out[it.e.ID] = DropStored
			default:
				if o.killLocked(q, it, ReasonDropped, EventDeadLetter, now) {
					out[it.e.ID] = Dropped
					wake(q) // what waited behind it may go now
				} else {
					out[it.e.ID] = DropFailed
				}
			}
		}
	}
	return out
}

// What DropQueued did with an envelope.
const (
	Dropped      = "dropped"
	DropInFlight = "in_flight"
	DropStored   = "stored_in_broker"
	DropFailed   = "store_failed"
)

// ResolveFailed starts the last error of an attempt whose peer's host
// name did not resolve.
const ResolveFailed = "name resolution failed"

// Retry makes the envelopes queued for the given peers (every peer if
// none is given) due now: an open breaker goes to its probe (one attempt
// first; if it is acknowledged the rest follow) and envelopes waiting for
// their next attempt wait no longer. It returns how many envelopes it made
// due: those queued and not being attempted right now.
func (o *Outbox) Retry(peers ...identity.PeerID) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	qs := make([]*peerQ, 0, len(o.peers))
	if len(peers) == 0 {
		for _, q := range o.peers {
			qs = append(qs, q)
		}
	}
	for _, id := range peers {
		if q := o.peers[id]; q != nil {
			qs = append(qs, q)
		}
	}
	now := o.opts.Now()
	n := 0
	for _, q := range qs {
		if len(q.items) == 0 {
			continue
		}
		if !q.breaker.OpenUntil.IsZero() && now.Before(q.breaker.OpenUntil) {
			q.breaker.OpenUntil = now // half-open: the next attempt is the probe
		}
		for _, it := range q.items {
			if it.inFlight {
				continue
			}
			if now.Before(it.e.NextAttempt) {
				it.e.NextAttempt = now
			}
			n++
		}
		o.runLocked(q)
		wake(q)
	}
	return n
}

// Kick tells the outbox that peer id is reachable again (it just sent us
// a valid envelope, connected to us or announced itself): an open breaker
// goes to its probe (with nothing queued too, so that the next send is
// not held back by failures from before the peer came back) and a
// waiting envelope is tried now.
func (o *Outbox) Kick(id identity.PeerID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.peers[id]
	if q == nil || q.inFlight > 0 {
		return
	}
	now := o.opts.Now()
	waiting := false
	if !q.breaker.OpenUntil.IsZero() && now.Before(q.breaker.OpenUntil) {
		q.breaker.OpenUntil = now // half-open: the next attempt is the probe
		waiting = true
	}
	if len(q.items) == 0 {
		return
	}
	for _, it := range q.items { // every envelope that failed waits no longer
		if now.Before(it.e.NextAttempt) {
			it.e.NextAttempt = now
			waiting = true
		}
	}
	if waiting {
		wake(q)
	}
}
