//go:build !race

// The race detector adds allocations of its own, so allocation counts are
// checked in normal builds only.

package identity

import "testing"

// A reused Batch with its keys cached allocates a fixed number of times
// per Verify (the library's scratch for the batch equation), never per
// entry.
func TestBatchAllocs(t *testing.T) {
	es := benchEntries(t, 128)
	counts := map[int]float64{}
	for _, n := range []int{2, 16, 64, 128} {
		var b Batch
		ok := make([]bool, n)
		run := func() {
			b.Reset()
			for _, e := range es[:n] {
				b.Add(PeerID(e.pub), e.msg, e.sig)
			}
			if !b.Verify(ok) {
				t.Fatal("batch does not verify")
			}
		}
		run() // fill the key cache and the entry slices
		counts[n] = testing.AllocsPerRun(20, run)
	}
	t.Logf("allocations per batch by size: %v", counts)
	for n, c := range counts {
		if c > maxBatchAllocs {
			t.Errorf("a batch of %d allocates %.0f times, budget %d whatever the size: something allocates per entry", n, c, maxBatchAllocs)
		}
	}
}

// maxBatchAllocs bounds the allocations of one Verify of a reused Batch:
// the library's scratch slices and random-scalar generator, whose number
// varies a little with the size of the multiplication, not with entries.
const maxBatchAllocs = 16
