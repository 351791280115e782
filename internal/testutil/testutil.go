package testutil

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// leakWait bounds how long CheckGoroutines waits for the test's
	// goroutines to finish. It is generous because a loaded machine
	// running with -race can be slow to let a closing goroutine exit; a
	// clean test does not wait at all.
	leakWait = 10 * time.Second

	// waitPoll is how often WaitFor asks its condition: soon enough after
	// it holds, and seldom enough not to slow down, by calling Stats and
	// the like, the code being waited for (polling every millisecond made
	// comms' timing-sensitive tests fail more often under load).
	waitPoll = 5 * time.Millisecond
)

// CheckGoroutines fails t if a goroutine started after the call is still
// running when the test ends. It records the goroutines running now and
// registers a t.Cleanup that waits up to 10 seconds for every other
// goroutine to exit, then reports the stacks of those still running.
//
// Goroutines are told apart by their ids, not counted: a leak is found
// even if a goroutine that ran before the call has exited meanwhile.
//
// Cleanups run last-registered first, so call CheckGoroutines before
// opening what the test closes in its own cleanups: the check then runs
// after them.
func CheckGoroutines(t testing.TB) {
	t.Helper()
	checkGoroutines(t, leakWait)
}

func checkGoroutines(t testing.TB, wait time.Duration) {
	t.Helper()
	before := make(map[string]bool)
	for _, g := range goroutines() {
		before[g.id] = true
	}
	t.Cleanup(func() {
		t.Helper()
		deadline := time.Now().Add(wait)
		pause := time.Millisecond
		for {
			var leaked []string
			for _, g := range goroutines() {
				if !before[g.id] {
					leaked = append(leaked, g.stack)
				}
			}
			if len(leaked) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutines leaked: %d started during the test, still running %v after it:\n\n%s",
					len(leaked), wait, strings.Join(leaked, "\n\n"))
				return
			}
			// Each look stops the world for a moment: back off, so as
			// not to slow down the goroutines being waited for.
			time.Sleep(pause)
			pause = min(2*pause, 20*time.Millisecond)
		}
	})
}

// goroutine is one goroutine in a stack dump.
type goroutine struct {
	id    string // the number after "goroutine "
	stack string // its whole entry, header included
}

// goroutines returns the running goroutines, from runtime.Stack.
func goroutines() []goroutine {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	for entry := range bytes.SplitSeq(bytes.TrimSpace(buf), []byte("\n\n")) {
		// Each entry starts "goroutine 42 [chan receive]:".
		rest, ok := bytes.CutPrefix(entry, []byte("goroutine "))
		if !ok {
			continue
		}
		id, _, _ := bytes.Cut(rest, []byte(" "))
		if _, err := strconv.ParseUint(string(id), 10, 64); err != nil {
			continue
		}
		out = append(out, goroutine{id: string(id), stack: string(entry)})
	}
	return out
}

// WaitFor polls cond until it returns true, and fails t with t.Fatalf,
// naming what, if it still returns false after d. It asks cond every 5
// milliseconds, the last time after d has passed.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		expired := time.Now().After(deadline)
		if cond() {
			return
		}
		if expired {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(waitPoll)
	}
}
