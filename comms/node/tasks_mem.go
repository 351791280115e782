package node

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox/store"
)

// taskStore keeps the tasks: the home's SQLite table ([store.Tasks]) or,
// with [store] mode = "memory", memTasks (lost when the node stops). Both
// keep the same limits and answer the same way.
type taskStore interface {
	Touch(id string, peer identity.PeerID, local bool, at time.Time) (created bool, err error)
	Complete(id string, by identity.PeerID, result []byte, at time.Time) (changed bool, err error)
	Get(id string) (store.Task, bool, error)
	List(state string, limit int) ([]store.Task, error)
}

var (
	_ taskStore = (*store.Tasks)(nil)
	_ taskStore = (*memTasks)(nil)
)

// memTasks is the memory task table. It is safe for concurrent use.
type memTasks struct {
	mu    sync.Mutex
	tasks map[string]*store.Task
}

func newMemTasks() *memTasks { return &memTasks{tasks: map[string]*store.Task{}} }

func (m *memTasks) Touch(id string, peer identity.PeerID, local bool, at time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	created := false
	t, ok := m.tasks[id]
	if !ok {
		if len(m.tasks) >= store.MaxTasks && !m.evictLocked() {
			return false, store.ErrTasksFull
		}
		t = &store.Task{ID: id, State: store.TaskOpen, Created: at, Updated: at}
		m.tasks[id] = t
		created = true
	}
	t.Local = t.Local || local
	if peer.IsZero() || slices.Contains(t.Participants, peer) {
		if at.After(t.Updated) { // activity under it, as the SQLite table counts it
			t.Updated = at
		}
		return created, nil
	}
	if len(t.Participants) >= store.MaxTaskParticipants {
		return created, store.ErrTasksFull
	}
	t.Participants = append(t.Participants, peer)
	if at.After(t.Updated) {
		t.Updated = at
	}
	return created, nil
}

// evictLocked drops the completed task updated longest ago, else the
// open one only peers brought updated longest ago (as the SQLite table
// does); m.mu is held.
func (m *memTasks) evictLocked() bool {
	rank := func(t *store.Task) int { // lower goes first; -1: kept
		switch {
		case t.State == store.TaskCompleted:
			return 0
		case !t.Local:
			return 1
		}
		return -1
	}
	var old *store.Task
	for _, t := range m.tasks {
		r := rank(t)
		if r < 0 {
			continue
		}
		if old == nil || r < rank(old) || r == rank(old) && (t.Updated.Before(old.Updated) || t.Updated.Equal(old.Updated) && t.ID < old.ID) {
			old = t
		}
	}
	if old == nil {
		return false
	}
	delete(m.tasks, old.ID)
	return true
}

func (m *memTasks) Complete(id string, by identity.PeerID, result []byte, at time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tasks[id]
	switch {
	case !ok:
		return false, store.ErrUnknownTask
	case t.State == store.TaskCompleted:
		return false, nil
	}
	t.State, t.Updated, t.CompletedBy, t.CompletedAt = store.TaskCompleted, at, by, at
	t.Result = slices.Clone(result)
	return true, nil
}

func (m *memTasks) Get(id string) (store.Task, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tasks[id]
	if !ok {
		return store.Task{}, false, nil
	}
	return cloneTask(t), true, nil
}

func (m *memTasks) List(state string, limit int) ([]store.Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Task
	for _, t := range m.tasks {
		if state == "" || t.State == state {
			out = append(out, cloneTask(t))
		}
	}
	slices.SortFunc(out, func(a, b store.Task) int {
		// By the wall clock, to the nanosecond, as the SQLite table
		// orders them (and as task list cursors count).
		if c := cmp.Compare(b.Updated.UnixNano(), a.Updated.UnixNano()); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out[:min(len(out), limit)], nil
}

func cloneTask(t *store.Task) store.Task {
	c := *t
	c.Participants = slices.Clone(t.Participants)
	c.Result = slices.Clone(t.Result)
	return c
}
