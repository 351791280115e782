package inbox

import (
	"context"
	"errors"
	"sync"
)

// Errors returned by a Queue.
var (
	// ErrFull means the queue holds its maximum number of items.
	ErrFull = errors.New("inbox: full")
	// ErrClosed means the queue was closed.
	ErrClosed = errors.New("inbox: closed")
)

// DefaultMax is the maximum length of a queue created with max <= 0.
const DefaultMax = 10000

// Queue is a bounded FIFO with a ready signal. The zero value is not usable;
// call [New].
type Queue[T any] struct {
	mu        sync.Mutex
	items     []T
	max       int
	highWater int
	closed    bool
	// ready holds a token while the queue is non-empty or closed, so a
	// waiter never misses an arrival: Push fills it on empty→non-empty,
	// Drain takes it.
	ready chan struct{}
}

// New returns a queue that holds at most max items (DefaultMax if max <= 0).
func New[T any](max int) *Queue[T] {
	if max <= 0 {
		max = DefaultMax
	}
	return &Queue[T]{max: max, ready: make(chan struct{}, 1)}
}

// Push appends item. It returns ErrFull when the queue is at its maximum and
// ErrClosed after Close; in both cases the item was not stored.
func (q *Queue[T]) Push(item T) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	if len(q.items) >= q.max {
		return ErrFull
	}
	q.items = append(q.items, item)
	q.highWater = max(q.highWater, len(q.items))
	if len(q.items) == 1 {
		q.signalLocked()
	}
	return nil
}

func (q *Queue[T]) signalLocked() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Ready returns a channel that has a value when the queue may be non-empty
// (or is closed). After receiving from it, call Drain; an empty Drain just
// means another consumer was first.
func (q *Queue[T]) Ready() <-chan struct{} { return q.ready }

// Drain removes and returns every queued item, oldest first (nil when
// empty). After Close it returns what was left, then nil.
func (q *Queue[T]) Drain() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	select {
	case <-q.ready:
	default:
	}
	if q.closed {
		q.signalLocked() // keep waking waiters after close
	}
	return items
}

// Wait blocks until at least one item is queued, then drains the queue. It
// returns ctx.Err() if ctx ends first and ErrClosed once the queue is
// closed and empty.
func (q *Queue[T]) Wait(ctx context.Context) ([]T, error) {
	for {
		if items := q.Drain(); len(items) > 0 {
			return items, nil
		}
		q.mu.Lock()
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-q.ready:
			// Put the token back so Drain's bookkeeping stays uniform
			// and other waiters also look.
			q.mu.Lock()
			q.signalLocked()
			q.mu.Unlock()
		}
	}
}

// Len returns the number of queued items.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// HighWater returns the largest length the queue has reached.
func (q *Queue[T]) HighWater() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.highWater
}

// Max returns the queue's maximum length.
func (q *Queue[T]) Max() int { return q.max }

// Close stops further pushes and wakes every waiter. Queued items can still
// be drained. Close is idempotent.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.signalLocked()
}
