package testutil

import (
	"sync"
	"testing"
	"time"
)

// RunInFlight runs op b.N times, at most inFlight at a time, each on a
// goroutine of its own, and returns the wall time they took (timer reset
// before the first, stopped after the last); it fails b on the first
// error.
func RunInFlight(b *testing.B, inFlight int, op func(i int) error) time.Duration {
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := op(i); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return time.Since(start)
}
