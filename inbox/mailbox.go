package inbox

import (
	"context"
	"sync"
)

// Mailbox is a bounded store of items that readers list without removing:
// each item gets a sequence number, readers page with "after this
// sequence", wait for new arrivals, and acknowledge items to remove them.
// It suits consumers that look at mail repeatedly (a CLI, an MCP client)
// rather than an agent loop that drains at turn boundaries.
//
// A full Mailbox refuses pushes with [ErrFull]; items leave only when
// acknowledged. The zero value is not usable; call [NewMailbox]. A Mailbox
// is safe for concurrent use.
type Mailbox[T any] struct {
	mu       sync.Mutex
	entries  []Entry[T] // oldest first, unacknowledged only
	next     uint64     // sequence of the next push; sequences start at 1
	max      int
	maxBytes int         // 0: no byte limit
	sizeOf   func(T) int // item size for maxBytes
	bytes    int         // total size of entries
	closed   bool
	// changed is closed on the next push, ack or close, to wake all
	// waiters at once; it is made when a waiter first asks for it (nil:
	// nobody waits, and a push costs no channel).
	changed chan struct{}
}

// Entry is one stored item and its sequence number.
type Entry[T any] struct {
	Seq  uint64
	Item T
}

// NewMailbox returns a mailbox holding at most max items (DefaultMax if
// max <= 0).
func NewMailbox[T any](max int) *Mailbox[T] {
	if max <= 0 {
		max = DefaultMax
	}
	return &Mailbox[T]{max: max, next: 1}
}

// SetByteLimit makes the mailbox also refuse a push ([ErrFull]) that would
// take the total size of stored items, as sizeOf measures them, above
// maxBytes. One item is always admitted into an empty mailbox, whatever its
// size. Call it before use.
func (m *Mailbox[T]) SetByteLimit(maxBytes int, sizeOf func(T) int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxBytes, m.sizeOf = maxBytes, sizeOf
}

func (m *Mailbox[T]) size(item T) int {
	if m.sizeOf == nil {
		return 0
	}
	return m.sizeOf(item)
}

func (m *Mailbox[T]) broadcastLocked() {
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
}

// changedLocked returns the channel the next change closes.
func (m *Mailbox[T]) changedLocked() chan struct{} {
	if m.changed == nil {
		m.changed = make(chan struct{})
	}
	return m.changed
}

// Push stores item. It returns ErrFull when the mailbox holds its maximum
// and ErrClosed after Close; then the item was not stored.
func (m *Mailbox[T]) Push(item T) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if len(m.entries) >= m.max {
		return ErrFull
	}
	n := m.size(item)
	if m.maxBytes > 0 && len(m.entries) > 0 && m.bytes+n > m.maxBytes {
		return ErrFull
	}
	m.bytes += n
	m.entries = append(m.entries, Entry[T]{Seq: m.next, Item: item})
	m.next++
	m.broadcastLocked()
	return nil
}

// List returns up to limit unacknowledged entries with sequence above
// after, oldest first (limit <= 0: all).
func (m *Mailbox[T]) List(after uint64, limit int) []Entry[T] {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.listLocked(after, limit)
}

func (m *Mailbox[T]) listLocked(after uint64, limit int) []Entry[T] {
	var out []Entry[T]
	for _, e := range m.entries {
		if e.Seq > after {
			out = append(out, e)
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	return out
}

// Wait is List, but if nothing matches it waits until something arrives, the
// mailbox closes, or ctx ends; then it returns what matches (possibly
// nothing) and ctx.Err() if ctx ended.
func (m *Mailbox[T]) Wait(ctx context.Context, after uint64, limit int) ([]Entry[T], error) {
	for {
		m.mu.Lock()
		out := m.listLocked(after, limit)
		closed, changed := m.closed, m.changedLocked()
		m.mu.Unlock()
		if len(out) > 0 || closed {
			return out, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Ack removes the entries whose sequence numbers are listed and returns how
// many it removed (unknown or already acknowledged numbers are skipped).
func (m *Mailbox[T]) Ack(seqs ...uint64) int {
	want := make(map[uint64]bool, len(seqs))
	for _, s := range seqs {
		want[s] = true
	}
	return m.remove(func(seq uint64) bool { return want[seq] })
}

// AckUpTo removes every entry with sequence at most upTo.
func (m *Mailbox[T]) AckUpTo(upTo uint64) int {
	return m.remove(func(seq uint64) bool { return seq <= upTo })
}

func (m *Mailbox[T]) remove(drop func(uint64) bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.entries[:0]
	for _, e := range m.entries {
		if !drop(e.Seq) {
			kept = append(kept, e)
		} else {
			m.bytes -= m.size(e.Item)
		}
	}
	n := len(m.entries) - len(kept)
	clear(m.entries[len(kept):])
	m.entries = kept
	if n > 0 {
		m.broadcastLocked()
	}
	return n
}

// Len returns the number of unacknowledged entries.
func (m *Mailbox[T]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// Changed returns a channel closed at the next push, ack or close.
func (m *Mailbox[T]) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changedLocked()
}

// Close refuses further pushes and wakes waiters; stored entries stay
// listable. Close is idempotent.
func (m *Mailbox[T]) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		m.broadcastLocked()
	}
}
