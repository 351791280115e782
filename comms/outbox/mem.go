package outbox

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// MemStore is a [Store] in memory, for nodes that keep nothing on disk
// ([store] mode = "memory") and for tests. Its outbox ends with the process.
type MemStore struct {
	mu       sync.Mutex
	seq      uint64
	entries  []Entry // Seq order
	dead     []DeadLetter
	breakers map[identity.PeerID]Breaker
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{breakers: map[identity.PeerID]Breaker{}} }

func (m *MemStore) index(id identity.UUID) int {
	return slices.IndexFunc(m.entries, func(e Entry) bool { return e.ID == id })
}

// Add implements [Store].
func (m *MemStore) Add(e Entry) (Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.index(e.ID) >= 0 {
		return e, fmt.Errorf("%w: entry %s", ErrQueued, e.ID)
	}
	m.seq++
	e.Seq = m.seq
	e.Payload = slices.Clone(e.Payload)
	m.entries = append(m.entries, e)
	return e, nil
}

// Entries implements [Store].
func (m *MemStore) Entries() ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.entries), nil
}

// Delivered implements [Store].
func (m *MemStore) Delivered(ids ...identity.UUID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := make(map[identity.UUID]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	m.entries = slices.DeleteFunc(m.entries, func(e Entry) bool { return set[e.ID] })
	return nil
}

// Attempted implements [Store].
func (m *MemStore) Attempted(id identity.UUID, attempts int, next time.Time, lastErr string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := m.index(id); i >= 0 {
		m.entries[i].Attempts, m.entries[i].NextAttempt, m.entries[i].LastError = attempts, next, lastErr
	}
	return nil
}

// Kill implements [Store].
func (m *MemStore) Kill(id identity.UUID, reason string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.index(id)
	if i < 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	m.dead = append(m.dead, DeadLetter{Entry: m.entries[i], Reason: reason, DiedAt: at})
	m.entries = slices.Delete(m.entries, i, i+1)
	return nil
}

// DeadLetters implements [Store].
func (m *MemStore) DeadLetters() ([]DeadLetter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.dead), nil
}

// Revive implements [Store].
func (m *MemStore) Revive(ids ...identity.UUID) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Entry
	m.dead = slices.DeleteFunc(m.dead, func(d DeadLetter) bool {
		if len(ids) > 0 && !slices.Contains(ids, d.ID) {
			return false
		}
		e := d.Entry
		m.seq++
		e.Seq, e.Attempts, e.NextAttempt, e.LastError, e.Expires = m.seq, 0, time.Time{}, "", time.Time{}
		m.entries = append(m.entries, e)
		out = append(out, e)
		return true
	})
	return out, nil
}

// Drop implements [Store].
func (m *MemStore) Drop(ids ...identity.UUID) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.dead)
	m.dead = slices.DeleteFunc(m.dead, func(d DeadLetter) bool { return slices.Contains(ids, d.ID) })
	return n - len(m.dead), nil
}

// Prune implements [Store].
func (m *MemStore) Prune(max int, before time.Time) ([]DeadLetter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []DeadLetter
	keep := m.dead[:0]
	for i, d := range m.dead {
		if !before.IsZero() && !d.DiedAt.IsZero() && d.DiedAt.Before(before) || max >= 0 && len(m.dead)-i > max {
			out = append(out, d)
			continue
		}
		keep = append(keep, d)
	}
	clear(m.dead[len(keep):])
	m.dead = keep
	return out, nil
}

// Breakers implements [Store].
func (m *MemStore) Breakers() ([]Breaker, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Breaker, 0, len(m.breakers))
	for _, b := range m.breakers {
		out = append(out, b)
	}
	return out, nil
}

// SaveBreaker implements [Store].
func (m *MemStore) SaveBreaker(b Breaker) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b.Failures == 0 && b.OpenUntil.IsZero() {
		delete(m.breakers, b.Peer)
	} else {
		m.breakers[b.Peer] = b
	}
	return nil
}
