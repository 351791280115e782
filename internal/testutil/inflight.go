package testutil

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// RunInFlight runs op(0) … op(b.N-1) with at most inFlight running at
// once, on inFlight goroutines that each take the next i in turn (a
// goroutine per op would grow a fresh stack for every send, which the
// daemon's senders, long-lived goroutines, do not), and returns the time
// it took. The first error stops the workers taking more and fails b.
func RunInFlight(b *testing.B, inFlight int, op func(i int) error) time.Duration {
	inFlight = max(1, min(inFlight, b.N))
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		failed   atomic.Bool // firstErr is set, by the one that set this
		firstErr error
	)
	b.ResetTimer()
	start := time.Now()
	for range inFlight {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N || failed.Load() {
					return
				}
				if err := op(i); err != nil && failed.CompareAndSwap(false, true) {
					firstErr = err
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return time.Since(start)
}
