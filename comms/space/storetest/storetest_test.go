package storetest

import (
	"sync"
	"testing"

	"github.com/meerkatd/meerkatd/comms/space"
)

// The memory store meets the contract; the SQLite store runs the suite in
// inbox/store.
func TestMemStore(t *testing.T) {
	Run(t, func(t *testing.T) space.Store { return space.NewMemStore() })
}

// The durability suite passes for a store that keeps everything: here a
// MemStore per directory that outlives its "close". This checks the suite
// itself (its expectations are consistent with Run's); the SQLite store
// runs it for real.
func TestDurableSuite(t *testing.T) {
	var mu sync.Mutex
	stores := map[string]*space.MemStore{}
	RunDurable(t, func(t *testing.T, dir string) (space.Store, func() error) {
		mu.Lock()
		defer mu.Unlock()
		s, ok := stores[dir]
		if !ok {
			s = space.NewMemStore()
			stores[dir] = s
		}
		return s, func() error { return nil }
	})
	if len(stores) != 5 {
		t.Fatalf("the durability suite used %d directories, want one per subtest (5)", len(stores))
	}
}
