//go:build !race

// The race detector adds allocations of its own (sync.Pool drops items at
// random under it), so allocation counts are checked in normal builds only;
// make test runs this file in its non-race pass.

package wire

import (
	"strings"
	"testing"
)

// One full exchange (seal a message, open it, seal the ack, open it) stays
// within the allocation budget of 30.
func TestExchangeAllocs(t *testing.T) {
	msg := Message(strings.Repeat("m", 100))
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(200, func() { buf = exchange(t, msg, buf) })
	t.Logf("allocations per exchange: %.1f", allocs)
	if allocs > 30 {
		t.Fatalf("an exchange allocates %.1f times, budget 30", allocs)
	}
}
