package testutil

import (
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTB records what the helpers report. Only the methods the helpers
// call are implemented; the embedded nil TB makes it a testing.TB.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	errors   []string
	fatal    bool
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

// Fatalf records the failure and ends the calling goroutine, as
// testing.T.Fatalf does.
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	f.mu.Lock()
	f.fatal = true
	f.mu.Unlock()
	runtime.Goexit()
}

// runCleanups runs the registered cleanups, last first, as testing does.
func (f *fakeTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// run calls fn(f) in its own goroutine, so that Fatalf can end it, and
// waits for it.
func (f *fakeTB) run(fn func(*fakeTB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
}

//go:noinline
func leakyBlocker(stop <-chan struct{}) { <-stop }

func TestCheckGoroutines(t *testing.T) {
	for _, tc := range []struct {
		name string
		// body runs between the check's start and its cleanup; it returns
		// a function that releases whatever it left running.
		body func() (release func())
		// oldExits ends, during the test, a goroutine that was running
		// before the check.
		oldExits bool
		wantLeak bool
	}{
		{
			name: "no goroutines",
			body: func() func() { return func() {} },
		},
		{
			name: "goroutine that exits during the wait",
			body: func() func() {
				go time.Sleep(50 * time.Millisecond)
				return func() {}
			},
		},
		{
			name:     "old goroutine exits",
			body:     func() func() { return func() {} },
			oldExits: true,
		},
		{
			name: "goroutine still blocked",
			body: func() func() {
				stop := make(chan struct{})
				go leakyBlocker(stop)
				return func() { close(stop) }
			},
			wantLeak: true,
		},
		{
			// Counting goroutines would miss this leak: one from before
			// the check exits while a new one stays.
			name: "old goroutine exits, new one stays",
			body: func() func() {
				stop := make(chan struct{})
				go leakyBlocker(stop)
				return func() { close(stop) }
			},
			oldExits: true,
			wantLeak: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oldStop := make(chan struct{})
			oldDone := make(chan struct{})
			go func() { defer close(oldDone); <-oldStop }()
			defer func() { close(oldStop); <-oldDone }()

			f := &fakeTB{}
			checkGoroutines(f, 300*time.Millisecond)
			release := tc.body()
			if tc.oldExits {
				oldStop <- struct{}{}
			}
			f.runCleanups()
			release()

			if gotLeak := len(f.errors) > 0; gotLeak != tc.wantLeak {
				t.Fatalf("leak reported: %v, want %v; errors: %q", gotLeak, tc.wantLeak, f.errors)
			}
			if !tc.wantLeak {
				return
			}
			if !strings.Contains(f.errors[0], "leakyBlocker") {
				t.Errorf("the report does not show the leaked goroutine's stack:\n%s", f.errors[0])
			}
			if n := strings.Count(f.errors[0], "\ngoroutine "); n != 1 {
				t.Errorf("the report lists %d goroutines, want only the leaked one:\n%s", n, f.errors[0])
			}
		})
	}
}

func TestGoroutinesSeesAll(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	const n = 2000 // more than fit in the first buffer
	var started sync.WaitGroup
	for range n {
		started.Add(1)
		go func() { started.Done(); leakyBlocker(stop) }()
	}
	started.Wait()
	got := 0
	for _, g := range goroutines() {
		if strings.Contains(g.stack, "leakyBlocker") {
			got++
		}
	}
	if got != n {
		t.Errorf("goroutines found %d blocked goroutines, want %d", got, n)
	}
}

func TestWaitFor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		d         time.Duration
		trueAfter int // cond returns true from this call on; 0: never
		wantFail  bool
	}{
		{name: "already true", d: time.Second, trueAfter: 1},
		{name: "true after some polls", d: 5 * time.Second, trueAfter: 20},
		{name: "never true", d: 50 * time.Millisecond, wantFail: true},
		{name: "zero duration, true", d: 0, trueAfter: 1},
		{name: "zero duration, false", d: 0, wantFail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTB{}
			calls := 0
			start := time.Now()
			f.run(func(f *fakeTB) {
				WaitFor(f, tc.d, "the thing", func() bool {
					calls++
					return tc.trueAfter > 0 && calls >= tc.trueAfter
				})
			})
			if f.fatal != tc.wantFail {
				t.Fatalf("failed: %v, want %v (%q)", f.fatal, tc.wantFail, f.errors)
			}
			if !tc.wantFail {
				if calls != tc.trueAfter {
					t.Errorf("cond called %d times, want %d (WaitFor must stop once it holds)", calls, tc.trueAfter)
				}
				return
			}
			if len(f.errors) != 1 || !strings.Contains(f.errors[0], "the thing") {
				t.Errorf("failure %q does not name what was awaited", f.errors)
			}
			if elapsed := time.Since(start); elapsed < tc.d {
				t.Errorf("gave up after %v, before the %v", elapsed, tc.d)
			}
		})
	}
}

// TestOnlyTestsImport checks that no package's non-test code imports this
// one.
func TestOnlyTestsImport(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	const self = "github.com/meerkatd/meerkatd/internal/testutil"
	out, err := exec.Command(goTool, "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "github.com/meerkatd/meerkatd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			if imp == self {
				t.Errorf("%s imports %s outside its tests", fields[0], self)
			}
		}
	}
}
