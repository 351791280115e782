package node

import "sync"

// maxShown bounds the seqs a shownSet keeps. Past it the set forgets the
// items below the oldest unacknowledged one, then, if that is not
// enough, everything: an item forgotten is one an up_to acknowledgement
// leaves pending until a read returns it again (never one acknowledged
// unseen).
const maxShown = 1 << 17

// shownSet holds the seqs of the unacknowledged items that a read
// (Receive without Peek) returned since the node started. Ack with UpTo
// acknowledges only those: a read whose filters skipped an item moves
// its cursor past it, and an acknowledgement up to that cursor, with
// other filters or none, must not take the item with it unseen. It is
// safe for concurrent use; the zero value is empty.
type shownSet struct {
	mu sync.Mutex
	m  map[uint64]struct{}
}

// mark records the items of a batch as shown. oldest returns the seq of
// the oldest unacknowledged item (0: none); it is called only when the
// set is full.
func (s *shownSet) mark(msgs []Message, oldest func() uint64) {
	if len(msgs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[uint64]struct{}{}
	}
	if len(s.m)+len(msgs) > maxShown {
		low := oldest()
		for seq := range s.m {
			if seq < low {
				delete(s.m, seq) // acknowledged some other way
			}
		}
		if len(s.m)+len(msgs) > maxShown {
			clear(s.m)
		}
	}
	for _, m := range msgs {
		s.m[m.Seq] = struct{}{}
	}
}

// has reports whether a read returned the item with seq.
func (s *shownSet) has(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[seq]
	return ok
}

// forget drops acknowledged items.
func (s *shownSet) forget(seqs []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, seq := range seqs {
		delete(s.m, seq)
	}
}

// above counts the items reads returned with a seq above upTo (still
// pending: acknowledging forgets them).
func (s *shownSet) above(upTo uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for seq := range s.m {
		if seq > upTo {
			n++
		}
	}
	return n
}
