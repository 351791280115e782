package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// The task table is bounded: past MaxTasks a new task replaces the
// completed task updated longest ago, else the open one only peers
// brought, and is refused while every task is open and this node's. Tasks survive a reopen, and a read-only store reads them.
func TestTasksLimitAndReopen(t *testing.T) {
	s, path := openStore(t, Options{})
	tk := s.Tasks()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make(chan error, MaxTasks)
	const workers = 50
	for w := range workers {
		wg.Add(1)
		go func() { // concurrent writers share group commits
			defer wg.Done()
			for i := w; i < MaxTasks; i += workers {
				id, local := fmt.Sprint("t", i), true
				if i == 0 {
					id, local = "p0", false // only peers brought it
				}
				if _, err := tk.Touch(id, identity.PeerID{}, local, t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if created, err := tk.Touch("one more", identity.PeerID{}, true, t0); err != nil || !created {
		t.Fatalf("a task past the limit: %v, %v: want the open task only peers brought replaced", created, err)
	}
	if _, ok, _ := tk.Get("p0"); ok {
		t.Fatal("the task only peers brought was kept")
	}
	if _, err := tk.Touch("two more", identity.PeerID{}, false, t0); !errors.Is(err, ErrTasksFull) {
		t.Fatalf("a task past the limit, every task open and this node's: %v", err)
	}
	for _, id := range []string{"t7", "t3"} {
		if _, err := tk.Complete(id, identity.PeerID{}, []byte(`"done"`), t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tk.Complete("t7", identity.PeerID{}, nil, t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if created, err := tk.Touch("three more", identity.PeerID{}, false, t0); err != nil || !created {
		t.Fatalf("one more after completions: %v, %v", created, err)
	}
	// t3 and t7 were completed at the same time: the one first by id goes.
	if _, ok, _ := tk.Get("t3"); ok {
		t.Fatal("the completed task updated longest ago was kept")
	}
	if got, ok, err := tk.Get("t7"); err != nil || !ok || got.State != TaskCompleted || string(got.Result) != `"done"` {
		t.Fatalf("t7: %+v, %v, %v", got, ok, err)
	}
	s.Close()
	if _, err := tk.Touch("x", identity.PeerID{}, true, t0); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	ro := reopen(t, path, Options{ReadOnly: true})
	ts, err := ro.Tasks().List(TaskCompleted, 10)
	if err != nil || len(ts) != 1 || ts[0].ID != "t7" {
		t.Fatalf("read only: %+v, %v", ts, err)
	}
	if _, err := ro.Tasks().Touch("y", identity.PeerID{}, true, t0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("write to a read-only store: %v", err)
	}
}

// A send or an arrival under a task, with a participant it has already,
// makes it the most recently updated: the list's order and the eviction
// follow activity, not only new participants.
func TestTaskTouchUpdates(t *testing.T) {
	s, _ := openStore(t, Options{})
	tk := s.Tasks()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bob := identity.PeerID{1}
	for i, id := range []string{"a", "b"} {
		if _, err := tk.Touch(id, bob, true, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tk.Touch("a", bob, true, t0.Add(time.Minute)); err != nil { // bob is a participant already
		t.Fatal(err)
	}
	ts, err := tk.List("", 10)
	if err != nil || len(ts) != 2 || ts[0].ID != "a" || !ts[0].Updated.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after activity under a: %+v, %v; want a first, updated a minute on", ts, err)
	}
	// An older time (an arrival stamped earlier) does not move it back.
	if _, err := tk.Touch("a", bob, false, t0); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := tk.Get("a"); !got.Updated.Equal(t0.Add(time.Minute)) {
		t.Fatalf("updated %v after an older touch", got.Updated)
	}
}
