//go:build !race

// The race detector adds allocations of its own, so allocation counts are
// checked in normal builds only; make test runs this file in its non-race
// pass (make alloc).

package node

import (
	"context"
	"testing"

	"github.com/meerkatd/meerkatd/config"
)

// TestRoundTripAllocs: one acknowledged message between two nodes in this
// process (sealing, writing, reading, admitting into the memory inbox,
// the audit record, the ack and its verification, on both sides) stays
// within its allocation budget. Each of the two signatures allocates twice
// inside the Ed25519 library (its hash state and the signature it
// returns), the price of signing in about half the time of crypto/ed25519.
func TestRoundTripAllocs(t *testing.T) {
	alice := deliveryPair(t, "uds", config.StoreMemory)
	ctx := context.Background()
	send := func() {
		if _, err := alice.r.SendMessage(ctx, "bob", "a message of some length"); err != nil {
			t.Fatal(err)
		}
	}
	send() // the connection
	allocs := testing.AllocsPerRun(500, send)
	t.Logf("allocations per round trip: %.1f", allocs)
	if allocs > 30 {
		t.Fatalf("a round trip allocates %.1f times, budget 30", allocs)
	}
}
