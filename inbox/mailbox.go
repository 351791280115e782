package inbox

import (
	"context"
	"slices"
	"sort"
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
	mu sync.Mutex
	// chunks holds the unacknowledged entries, oldest first, in slices
	// of capacity chunkLen; none is empty. A push appends to the last
	// chunk or starts a new one, never copying what is stored (a growing
	// slice of large entries would copy each one about four times over).
	// An ack moves entries within one chunk, or merges two neighbouring
	// chunks that fit in one; emptied chunks go to the garbage collector.
	chunks   [][]Entry[T]
	n        int    // entries stored
	next     uint64 // sequence of the next push; sequences start at 1
	max      int
	maxBytes int         // 0: no byte limit
	sizeOf   func(T) int // item size for maxBytes
	bytes    int         // total size of entries
	// senderOf names an item's sender for the fair share (SetShare);
	// nil: no share. shares counts what each sender holds.
	senderOf func(T) string
	sharePct int
	shares   Shares
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

// chunkLen is the capacity of one chunk of entries.
const chunkLen = 64

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

// SetShare gives each sender, as senderOf names it, a fair share of the
// mailbox ([FairShare] with percent): once the mailbox is over half full
// (items or bytes), a push from a sender holding more than its share
// returns [ErrShare] while other senders' pushes are still stored. Items
// whose sender is "" (local ones) have no share. Call it before use.
func (m *Mailbox[T]) SetShare(percent int, senderOf func(T) string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sharePct, m.senderOf = percent, senderOf
}

// unshare removes what es hold from their senders' shares.
func (m *Mailbox[T]) unshare(es ...Entry[T]) {
	if m.senderOf == nil {
		return
	}
	for _, e := range es {
		if k := m.senderOf(e.Item); k != "" {
			m.shares.Add(k, -1, -int64(m.size(e.Item)))
		}
	}
}

func (m *Mailbox[T]) size(item T) int {
	if m.sizeOf == nil {
		return 0
	}
	return m.sizeOf(item)
}

// sizes is the total size of es.
func (m *Mailbox[T]) sizes(es []Entry[T]) int {
	if m.sizeOf == nil {
		return 0
	}
	n := 0
	for _, e := range es {
		n += m.sizeOf(e.Item)
	}
	return n
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
	if m.n >= m.max {
		return ErrFull
	}
	n := m.size(item)
	if m.maxBytes > 0 && m.n > 0 && m.bytes+n > m.maxBytes {
		return ErrFull
	}
	if m.senderOf != nil {
		if k := m.senderOf(item); k != "" {
			total := Usage{int64(m.n), int64(m.bytes)}
			limit := Usage{int64(m.max), int64(m.maxBytes)}
			if !m.shares.Admit(m.sharePct, k, total, limit, int64(n)) {
				return ErrShare
			}
			m.shares.Add(k, 1, int64(n))
		}
	}
	m.bytes += n
	if k := len(m.chunks); k == 0 || len(m.chunks[k-1]) == cap(m.chunks[k-1]) {
		m.chunks = append(m.chunks, make([]Entry[T], 0, chunkLen))
	}
	last := &m.chunks[len(m.chunks)-1]
	*last = append(*last, Entry[T]{Seq: m.next, Item: item})
	m.n++
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
	c, i := m.search(func(seq uint64) bool { return seq > after })
	if c == len(m.chunks) {
		return nil
	}
	n := len(m.chunks[c]) - i // how many to return, counted before copying
	for k := c + 1; k < len(m.chunks) && (limit <= 0 || n < limit); k++ {
		n += len(m.chunks[k])
	}
	if limit > 0 {
		n = min(n, limit)
	}
	out := make([]Entry[T], 0, n)
	for ; len(out) < n; c, i = c+1, 0 {
		out = append(out, m.chunks[c][i:min(len(m.chunks[c]), i+n-len(out))]...)
	}
	return out
}

// search returns the position (chunk, index in it) of the first entry
// whose sequence satisfies from, which must be false for a prefix of the
// entries and true for the rest; (len(m.chunks), 0) if none does.
func (m *Mailbox[T]) search(from func(seq uint64) bool) (c, i int) {
	c = sort.Search(len(m.chunks), func(c int) bool {
		ch := m.chunks[c]
		return from(ch[len(ch)-1].Seq)
	})
	if c == len(m.chunks) {
		return c, 0
	}
	ch := m.chunks[c]
	return c, sort.Search(len(ch), func(i int) bool { return from(ch[i].Seq) })
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

// Last returns the sequence number of the newest entry ever pushed (0:
// none yet), acknowledged or not.
func (m *Mailbox[T]) Last() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.next - 1
}

// Ack removes the entries whose sequence numbers are listed and returns how
// many it removed (unknown or already acknowledged numbers are skipped).
func (m *Mailbox[T]) Ack(seqs ...uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	removed := 0
	for _, s := range seqs {
		c, i := m.search(func(seq uint64) bool { return seq >= s })
		if c == len(m.chunks) || m.chunks[c][i].Seq != s {
			continue
		}
		ch := m.chunks[c]
		m.bytes -= m.size(ch[i].Item)
		m.unshare(ch[i])
		copy(ch[i:], ch[i+1:])
		clear(ch[len(ch)-1:])
		m.chunks[c] = ch[:len(ch)-1]
		removed++
		m.rebalance(c)
	}
	m.removedLocked(removed)
	return removed
}

// AckUpTo removes every entry with sequence at most upTo.
func (m *Mailbox[T]) AckUpTo(upTo uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, i := m.search(func(seq uint64) bool { return seq > upTo })
	removed := 0
	for _, ch := range m.chunks[:c] {
		m.bytes -= m.sizes(ch)
		m.unshare(ch...)
		removed += len(ch)
	}
	if i > 0 { // the oldest entries of chunk c go too
		ch := m.chunks[c]
		m.bytes -= m.sizes(ch[:i])
		m.unshare(ch[:i]...)
		removed += i
		k := copy(ch, ch[i:])
		clear(ch[k:])
		m.chunks[c] = ch[:k]
	}
	m.chunks = slices.Delete(m.chunks, 0, c)
	if i > 0 {
		m.rebalance(0)
	}
	m.removedLocked(removed)
	return removed
}

// rebalance restores the chunks' shape after chunk c lost entries: an
// empty chunk goes, and neighbours that fit in one chunk become one.
// Adjacent chunks then always hold more than chunkLen entries together,
// so acknowledging scattered entries cannot leave memory in mostly empty
// chunks.
func (m *Mailbox[T]) rebalance(c int) {
	if len(m.chunks[c]) == 0 {
		m.chunks = slices.Delete(m.chunks, c, c+1)
		m.mergeNext(c - 1) // the chunks on either side are neighbours now
		return
	}
	m.mergeNext(c)     // chunk c and the one after it
	m.mergeNext(c - 1) // the one before it and chunk c
}

// mergeNext moves chunk c+1 into chunk c if both fit in one.
func (m *Mailbox[T]) mergeNext(c int) {
	if c < 0 || c+1 >= len(m.chunks) || len(m.chunks[c])+len(m.chunks[c+1]) > chunkLen {
		return
	}
	m.chunks[c] = append(m.chunks[c], m.chunks[c+1]...)
	m.chunks = slices.Delete(m.chunks, c+1, c+2)
}

func (m *Mailbox[T]) removedLocked(n int) {
	if n > 0 {
		m.n -= n
		m.broadcastLocked()
	}
}

// Len returns the number of unacknowledged entries.
func (m *Mailbox[T]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// Bytes returns the size of the unacknowledged entries as the byte limit
// counts it (0 without a byte limit).
func (m *Mailbox[T]) Bytes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
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
