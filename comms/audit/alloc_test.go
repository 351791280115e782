//go:build !race

// The race detector adds allocations of its own, so allocation counts are
// checked in normal builds only; make test runs this file in its non-race
// pass.

package audit

import (
	"encoding/json"
	"testing"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// Record costs the caller no allocation without bodies, one (the body
// copy) with them. The writer is held so only the caller's side counts.
func TestRecordAllocs(t *testing.T) {
	testutil.CheckGoroutines(t)
	for _, tc := range []struct {
		bodies bool
		budget float64
	}{{false, 0}, {true, 1}} {
		const runs = 1000
		l, _, entered, release := blockedLog(t, Options{Bodies: tc.bodies, QueueLen: 2 * runs})
		r := rec(1)
		r.Body = json.RawMessage(`{"text":"hello"}`)
		l.Record(r)
		<-entered
		allocs := testing.AllocsPerRun(runs, func() { l.Record(r) })
		release()
		mustClose(t, l)
		if allocs > tc.budget {
			t.Errorf("bodies=%v: Record allocates %.1f times, budget %.0f", tc.bodies, allocs, tc.budget)
		}
		if st := l.Stats(); st.Dropped != 0 {
			t.Errorf("bodies=%v: %d dropped", tc.bodies, st.Dropped)
		}
	}
}

// The writer encodes a row without allocating once its buffer has grown.
func TestAppendRecordAllocs(t *testing.T) {
	r := rec(1)
	buf := make([]byte, 0, 4096)
	if allocs := testing.AllocsPerRun(1000, func() { buf = appendRecord(buf[:0], &r) }); allocs != 0 {
		t.Errorf("appendRecord allocates %.1f times", allocs)
	}
}
