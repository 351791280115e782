package storetest

import (
	"testing"

	"github.com/meerkatd/meerkatd/comms/outbox"
)

// The memory store meets the contract; the SQLite store runs the suite in
// inbox/store.
func TestMemStore(t *testing.T) {
	Run(t, func(t *testing.T) outbox.Store { return outbox.NewMemStore() })
}
