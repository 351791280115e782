// Package storetest is a conformance suite for [outbox.Store]
// implementations: the memory store and the daemon's SQLite store run the
// same tests, so the scheduler can rely on one contract.
//
// [Run] checks what the interface documents plus these decisions, which
// every implementation must share:
//
//   - Add assigns Seq values that increase with every Add, including after
//     the newest entry was delivered (a Seq is never reused), and stores
//     every other field as given. Times compare with time.Time.Equal at
//     nanosecond precision (the location need not survive). An empty
//     Payload may read back as nil or as an empty slice: payloads compare
//     with bytes.Equal.
//   - Add of an ID already in the outbox fails (outbox.ErrQueued) and
//     changes nothing.
//   - Entries reflects every call that returned before it, including a
//     Delivered whose removal is not durable yet.
//   - Delivered ignores unknown ids and accepts none.
//   - Attempted of an id not in the outbox does nothing and succeeds (the
//     entry may have been delivered meanwhile); Kill of one fails with an
//     error wrapping [outbox.ErrNotFound]. Kill keeps every field of the
//     entry, Seq included.
//   - DeadLetters lists in kill order.
//   - Revive with no ids revives all dead letters, ignores unknown ids,
//     appends the revived entries after every existing one (new Seqs, in
//     kill order) with Attempts, NextAttempt, LastError and Expires
//     cleared, and returns exactly those entries.
//   - Drop counts the dead letters it deleted, ignores unknown ids, and
//     with no ids drops nothing.
//   - Prune removes the dead letters that died before its time and the
//     oldest beyond its count, returns them in kill order, and leaves the
//     outbox alone.
//   - Breakers round-trip; saving a closed one (no failures, zero
//     OpenUntil) deletes it. Breakers may come in any order.
//   - Concurrent Adds from many goroutines each store their entry exactly
//     once with a distinct Seq (run with -race).
//   - Times far ahead (written while the clock was wrong) are kept as
//     given; an [outbox.Outbox] loading them bounds them (see
//     [outbox.Bounds]), so the entry is attempted within the policy's
//     longest wait ([FarAhead]).
//
// It is not a durability test: restarts are the durable store's own tests
// ([FarAhead] takes a reopen function for them).
package storetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/identity"
)

// Run runs the suite, one subtest per behaviour. open returns a new, empty
// store for the subtest t and arranges its cleanup (t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) outbox.Store) {
	tests := []struct {
		name string
		f    func(*testing.T, outbox.Store)
	}{
		{"AddRoundTrip", testAddRoundTrip},
		{"AddZeroFields", testAddZeroFields},
		{"SeqNeverReused", testSeqNeverReused},
		{"AddDuplicate", testAddDuplicate},
		{"Delivered", testDelivered},
		{"Attempted", testAttempted},
		{"Kill", testKill},
		{"DeadLettersOrder", testDeadLettersOrder},
		{"ReviveSome", testReviveSome},
		{"ReviveAll", testReviveAll},
		{"Drop", testDrop},
		{"Prune", testPrune},
		{"Breakers", testBreakers},
		{"ConcurrentAdd", testConcurrentAdd},
		{"FarAhead", func(t *testing.T, s outbox.Store) { FarAhead(t, s, func() outbox.Store { return s }) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, open(t)) })
	}
}

// base is a time with nanoseconds and a zone, so precision and Equal
// (rather than ==) are exercised.
var base = time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.FixedZone("X", 3600))

// id returns a deterministic envelope id for n.
func id(n uint64) identity.UUID {
	var u identity.UUID
	u[0] = 0x42
	binary.BigEndian.PutUint64(u[8:], n)
	return u
}

func peer(n byte) identity.PeerID {
	var p identity.PeerID
	p[0], p[31] = n, 0xee
	return p
}

// entry returns an entry for n with every field set.
func entry(n uint64) outbox.Entry {
	at := base.Add(time.Duration(n) * time.Second)
	return outbox.Entry{
		ID:          id(n),
		To:          peer(byte(n%5 + 1)),
		Peer:        fmt.Sprintf("peer-%d", n%5),
		Kind:        "response",
		CorrID:      id(1000 + n),
		Payload:     []byte(fmt.Sprintf("sealed envelope %d", n)),
		Created:     at,
		Expires:     at.Add(time.Hour + 1),
		Attempts:    int(n % 3),
		NextAttempt: at.Add(time.Minute + 7),
		LastError:   fmt.Sprintf("dial: refused %d", n),
	}
}

// diff describes how got differs from want (Seq too unless it is zero in
// want), or returns "".
func diff(got, want outbox.Entry) string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s = %v, want %v", field, g, w)) }
	if want.Seq != 0 && got.Seq != want.Seq {
		add("Seq", got.Seq, want.Seq)
	}
	if got.ID != want.ID {
		add("ID", got.ID, want.ID)
	}
	if got.To != want.To {
		add("To", got.To, want.To)
	}
	if got.Peer != want.Peer {
		add("Peer", got.Peer, want.Peer)
	}
	if got.Kind != want.Kind {
		add("Kind", got.Kind, want.Kind)
	}
	if got.CorrID != want.CorrID {
		add("CorrID", got.CorrID, want.CorrID)
	}
	if !bytes.Equal(got.Payload, want.Payload) {
		add("Payload", got.Payload, want.Payload)
	}
	for _, f := range []struct {
		name string
		g, w time.Time
	}{{"Created", got.Created, want.Created}, {"Expires", got.Expires, want.Expires}, {"NextAttempt", got.NextAttempt, want.NextAttempt}} {
		if !f.g.Equal(f.w) {
			add(f.name, f.g, f.w)
		}
	}
	if got.Attempts != want.Attempts {
		add("Attempts", got.Attempts, want.Attempts)
	}
	if got.LastError != want.LastError {
		add("LastError", got.LastError, want.LastError)
	}
	return strings.Join(d, "; ")
}

func mustAdd(t *testing.T, s outbox.Store, e outbox.Entry) outbox.Entry {
	t.Helper()
	got, err := s.Add(e)
	if err != nil {
		t.Fatalf("Add(%s): %v", e.ID, err)
	}
	if got.Seq == 0 {
		t.Fatalf("Add(%s) assigned Seq 0", e.ID)
	}
	return got
}

func mustEntries(t *testing.T, s outbox.Store) []outbox.Entry {
	t.Helper()
	es, err := s.Entries()
	if err != nil {
		t.Fatalf("Entries: %v", err)
	}
	return es
}

func mustDead(t *testing.T, s outbox.Store) []outbox.DeadLetter {
	t.Helper()
	ds, err := s.DeadLetters()
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	return ds
}

func mustKill(t *testing.T, s outbox.Store, u identity.UUID, reason string, at time.Time) {
	t.Helper()
	if err := s.Kill(u, reason, at); err != nil {
		t.Fatalf("Kill(%s): %v", u, err)
	}
}

// checkEntries fails unless the outbox holds exactly want, in order.
func checkEntries(t *testing.T, s outbox.Store, want ...outbox.Entry) {
	t.Helper()
	got := mustEntries(t, s)
	if len(got) != len(want) {
		t.Fatalf("Entries: %d entries %v, want %d %v", len(got), idsOf(got), len(want), idsOf(want))
	}
	for i := range got {
		if d := diff(got[i], want[i]); d != "" {
			t.Errorf("Entries[%d] (%s): %s", i, want[i].ID, d)
		}
		if i > 0 && got[i].Seq <= got[i-1].Seq {
			t.Errorf("Entries not in Seq order: %d after %d", got[i].Seq, got[i-1].Seq)
		}
	}
}

func idsOf(es []outbox.Entry) []identity.UUID {
	var out []identity.UUID
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func testAddRoundTrip(t *testing.T, s outbox.Store) {
	var want []outbox.Entry
	var last uint64
	for n := range uint64(4) {
		e := entry(n)
		got := mustAdd(t, s, e)
		if got.Seq <= last {
			t.Fatalf("Add %d: Seq %d after %d, want increasing", n, got.Seq, last)
		}
		last = got.Seq
		e.Seq = got.Seq
		if d := diff(got, e); d != "" {
			t.Errorf("Add %d returned %s", n, d)
		}
		want = append(want, e)
	}
	checkEntries(t, s, want...)
}

func testAddZeroFields(t *testing.T, s outbox.Store) {
	// Every optional field zero: zero times stay zero, a zero CorrID
	// stays zero, an empty payload stays empty.
	e := outbox.Entry{ID: id(1), To: peer(1), Kind: "message"}
	e.Seq = mustAdd(t, s, e).Seq
	f := outbox.Entry{ID: id(2), To: peer(2), Kind: "message", Payload: []byte{}}
	f.Seq = mustAdd(t, s, f).Seq
	checkEntries(t, s, e, f)
	for _, g := range mustEntries(t, s) {
		if !g.Created.IsZero() || !g.Expires.IsZero() || !g.NextAttempt.IsZero() {
			t.Errorf("zero times read back as %v, %v, %v", g.Created, g.Expires, g.NextAttempt)
		}
	}
}

func testSeqNeverReused(t *testing.T, s outbox.Store) {
	a := mustAdd(t, s, entry(1))
	b := mustAdd(t, s, entry(2))
	if err := s.Delivered(b.ID); err != nil {
		t.Fatal(err)
	}
	mustKill(t, s, a.ID, outbox.ReasonExpired, base)
	if _, err := s.Drop(a.ID); err != nil {
		t.Fatal(err)
	}
	c := mustAdd(t, s, entry(3))
	if c.Seq <= b.Seq {
		t.Fatalf("Seq %d after %d was delivered: reused", c.Seq, b.Seq)
	}
}

func testAddDuplicate(t *testing.T, s outbox.Store) {
	e := mustAdd(t, s, entry(1))
	dup := entry(1)
	dup.Payload = []byte("other bytes")
	if got, err := s.Add(dup); !errors.Is(err, outbox.ErrQueued) {
		t.Fatalf("Add of a queued id: Seq %d, %v; want outbox.ErrQueued", got.Seq, err)
	}
	checkEntries(t, s, e)
	// The id can be added again once it left the outbox.
	if err := s.Delivered(e.ID); err != nil {
		t.Fatal(err)
	}
	f := mustAdd(t, s, dup)
	if f.Seq <= e.Seq {
		t.Fatalf("re-added Seq %d, want above %d", f.Seq, e.Seq)
	}
	checkEntries(t, s, f)
}

func testDelivered(t *testing.T, s outbox.Store) {
	var es []outbox.Entry
	for n := range uint64(5) {
		es = append(es, mustAdd(t, s, entry(n)))
	}
	if err := s.Delivered(es[1].ID, id(999), es[3].ID, es[1].ID); err != nil {
		t.Fatalf("Delivered: %v", err)
	}
	checkEntries(t, s, es[0], es[2], es[4])
	if err := s.Delivered(); err != nil {
		t.Fatalf("Delivered(): %v", err)
	}
	if err := s.Delivered(id(12345)); err != nil {
		t.Fatalf("Delivered(unknown): %v", err)
	}
	// The slice passed in may be reused by the caller right away.
	ids := []identity.UUID{es[0].ID, es[4].ID}
	if err := s.Delivered(ids...); err != nil {
		t.Fatal(err)
	}
	ids[0], ids[1] = id(777), id(778)
	checkEntries(t, s, es[2])
}

func testAttempted(t *testing.T, s outbox.Store) {
	a := mustAdd(t, s, entry(1))
	b := mustAdd(t, s, entry(2))
	next := base.Add(90*time.Second + 17)
	if err := s.Attempted(a.ID, 4, next, "write: broken pipe"); err != nil {
		t.Fatalf("Attempted: %v", err)
	}
	wantA := a
	wantA.Attempts, wantA.NextAttempt, wantA.LastError = 4, next, "write: broken pipe"
	checkEntries(t, s, wantA, b)
	// A zero next means at once.
	if err := s.Attempted(a.ID, 5, time.Time{}, ""); err != nil {
		t.Fatalf("Attempted: %v", err)
	}
	wantA.Attempts, wantA.NextAttempt, wantA.LastError = 5, time.Time{}, ""
	checkEntries(t, s, wantA, b)
	if err := s.Attempted(id(999), 1, next, "x"); err != nil {
		t.Fatalf("Attempted(unknown) = %v, want nil", err)
	}
	checkEntries(t, s, wantA, b)
}

func testKill(t *testing.T, s outbox.Store) {
	a := mustAdd(t, s, entry(1))
	b := mustAdd(t, s, entry(2))
	died := base.Add(time.Hour + 3)
	reason := outbox.ReasonExhausted + ": 10 attempts"
	mustKill(t, s, a.ID, reason, died)
	checkEntries(t, s, b)
	ds := mustDead(t, s)
	if len(ds) != 1 {
		t.Fatalf("DeadLetters = %d, want 1", len(ds))
	}
	if d := diff(ds[0].Entry, a); d != "" {
		t.Errorf("dead letter: %s", d)
	}
	if ds[0].Reason != reason || !ds[0].DiedAt.Equal(died) {
		t.Errorf("dead letter reason %q at %v, want %q at %v", ds[0].Reason, ds[0].DiedAt, reason, died)
	}
	for _, u := range []identity.UUID{a.ID, id(999)} {
		if err := s.Kill(u, outbox.ReasonExpired, died); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("Kill(%s) not in the outbox = %v, want ErrNotFound", u, err)
		}
	}
	if n := len(mustDead(t, s)); n != 1 {
		t.Fatalf("a failed Kill changed the dead letters: %d", n)
	}
}

func testDeadLettersOrder(t *testing.T, s outbox.Store) {
	var es []outbox.Entry
	for n := range uint64(4) {
		es = append(es, mustAdd(t, s, entry(n)))
	}
	order := []int{2, 0, 3, 1}
	for i, k := range order {
		mustKill(t, s, es[k].ID, outbox.ReasonRejected, base.Add(time.Duration(i)*time.Second))
	}
	ds := mustDead(t, s)
	if len(ds) != len(order) {
		t.Fatalf("DeadLetters = %d, want %d", len(ds), len(order))
	}
	for i, k := range order {
		if ds[i].ID != es[k].ID {
			t.Errorf("DeadLetters[%d] = %s, want %s (kill order)", i, ds[i].ID, es[k].ID)
		}
	}
	checkEntries(t, s)
}

// cleared is e as Revive puts it back, with Seq seq.
func cleared(e outbox.Entry, seq uint64) outbox.Entry {
	e.Seq, e.Attempts, e.NextAttempt, e.LastError, e.Expires = seq, 0, time.Time{}, "", time.Time{}
	return e
}

func testReviveSome(t *testing.T, s outbox.Store) {
	var es []outbox.Entry
	for n := range uint64(5) {
		e := entry(n)
		e.Attempts, e.LastError = 7, "refused"
		es = append(es, mustAdd(t, s, e))
	}
	// Kill 3, 1, 0 in that order; 2 and 4 stay queued.
	for i, k := range []int{3, 1, 0} {
		mustKill(t, s, es[k].ID, outbox.ReasonExhausted, base.Add(time.Duration(i)))
	}
	got, err := s.Revive(es[0].ID, id(999), es[3].ID, es[2].ID)
	if err != nil {
		t.Fatalf("Revive: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("Revive returned %d entries %v, want 2 (only dead letters are revived)", len(got), idsOf(got))
	}
	// Revived in kill order (3 before 0), after every queued entry.
	if got[0].ID != es[3].ID || got[1].ID != es[0].ID {
		t.Fatalf("Revive returned %v, want [%s %s] (kill order)", idsOf(got), es[3].ID, es[0].ID)
	}
	if got[0].Seq <= es[4].Seq || got[1].Seq <= got[0].Seq {
		t.Fatalf("revived Seqs %d, %d; want increasing above %d", got[0].Seq, got[1].Seq, es[4].Seq)
	}
	w3, w0 := cleared(es[3], got[0].Seq), cleared(es[0], got[1].Seq)
	for i, w := range []outbox.Entry{w3, w0} {
		if d := diff(got[i], w); d != "" {
			t.Errorf("Revive returned %s: %s", w.ID, d)
		}
	}
	checkEntries(t, s, es[2], es[4], w3, w0)
	ds := mustDead(t, s)
	if len(ds) != 1 || ds[0].ID != es[1].ID {
		t.Fatalf("dead letters after Revive: %d, want only %s", len(ds), es[1].ID)
	}
	// Reviving it again finds nothing.
	if got, err := s.Revive(es[3].ID); err != nil || len(got) != 0 {
		t.Fatalf("Revive of a revived id = %v, %v; want none", idsOf(got), err)
	}
}

func testReviveAll(t *testing.T, s outbox.Store) {
	if got, err := s.Revive(); err != nil || len(got) != 0 {
		t.Fatalf("Revive() with no dead letters = %v, %v", idsOf(got), err)
	}
	var es []outbox.Entry
	for n := range uint64(3) {
		es = append(es, mustAdd(t, s, entry(n)))
	}
	mustKill(t, s, es[1].ID, outbox.ReasonUnknownPeer, base)
	mustKill(t, s, es[0].ID, outbox.ReasonExpired, base.Add(1))
	got, err := s.Revive()
	if err != nil {
		t.Fatalf("Revive(): %v", err)
	}
	if len(got) != 2 || got[0].ID != es[1].ID || got[1].ID != es[0].ID {
		t.Fatalf("Revive() = %v, want [%s %s]", idsOf(got), es[1].ID, es[0].ID)
	}
	checkEntries(t, s, es[2], cleared(es[1], got[0].Seq), cleared(es[0], got[1].Seq))
	if ds := mustDead(t, s); len(ds) != 0 {
		t.Fatalf("%d dead letters after Revive()", len(ds))
	}
}

func testDrop(t *testing.T, s outbox.Store) {
	var es []outbox.Entry
	for n := range uint64(4) {
		es = append(es, mustAdd(t, s, entry(n)))
		mustKill(t, s, es[n].ID, outbox.ReasonExpired, base)
	}
	if n, err := s.Drop(); err != nil || n != 0 {
		t.Fatalf("Drop() = %d, %v; want 0 (no ids drops nothing)", n, err)
	}
	if n := len(mustDead(t, s)); n != 4 {
		t.Fatalf("Drop() dropped something: %d dead letters left", n)
	}
	if n, err := s.Drop(es[0].ID, id(999), es[2].ID, es[0].ID); err != nil || n != 2 {
		t.Fatalf("Drop = %d, %v; want 2", n, err)
	}
	ds := mustDead(t, s)
	if len(ds) != 2 || ds[0].ID != es[1].ID || ds[1].ID != es[3].ID {
		t.Fatalf("dead letters after Drop: %d", len(ds))
	}
	// Dropped ones cannot be revived.
	if got, err := s.Revive(es[0].ID); err != nil || len(got) != 0 {
		t.Fatalf("Revive of a dropped id = %v, %v", idsOf(got), err)
	}
	// Drop does not touch the outbox.
	f := mustAdd(t, s, entry(9))
	if n, err := s.Drop(f.ID); err != nil || n != 0 {
		t.Fatalf("Drop of a queued entry = %d, %v", n, err)
	}
	checkEntries(t, s, f)
}

func testPrune(t *testing.T, s outbox.Store) {
	var es []outbox.Entry
	for n := range uint64(6) {
		es = append(es, mustAdd(t, s, entry(n)))
		// Killed in order 0..5; 0 and 1 died an hour before the others.
		at := base
		if n < 2 {
			at = base.Add(-time.Hour)
		}
		mustKill(t, s, es[n].ID, outbox.ReasonExpired, at)
	}
	queued := mustAdd(t, s, entry(9))
	ds, err := s.Prune(-1, time.Time{})
	if err != nil || len(ds) != 0 {
		t.Fatalf("Prune(no limits) = %d, %v; want none", len(ds), err)
	}
	// Age: 0 and 1.
	ds, err = s.Prune(-1, base.Add(-time.Minute))
	if err != nil || len(ds) != 2 || ds[0].ID != es[0].ID || ds[1].ID != es[1].ID {
		t.Fatalf("Prune(age) = %v, %v; want entries 0, 1", len(ds), err)
	}
	if ds[0].Reason != outbox.ReasonExpired || !ds[0].DiedAt.Equal(base.Add(-time.Hour)) || string(ds[0].Payload) != string(es[0].Payload) {
		t.Fatalf("pruned dead letter: %+v", ds[0])
	}
	// Count: keep the 2 newest of 2..5.
	ds, err = s.Prune(2, base.Add(-time.Minute))
	if err != nil || len(ds) != 2 || ds[0].ID != es[2].ID || ds[1].ID != es[3].ID {
		t.Fatalf("Prune(count) = %d, %v; want entries 2, 3", len(ds), err)
	}
	left := mustDead(t, s)
	if len(left) != 2 || left[0].ID != es[4].ID || left[1].ID != es[5].ID {
		t.Fatalf("dead letters left: %d", len(left))
	}
	checkEntries(t, s, queued)
}

func mustBreakers(t *testing.T, s outbox.Store) []outbox.Breaker {
	t.Helper()
	bs, err := s.Breakers()
	if err != nil {
		t.Fatalf("Breakers: %v", err)
	}
	slices.SortFunc(bs, func(a, b outbox.Breaker) int { return bytes.Compare(a.Peer[:], b.Peer[:]) })
	return bs
}

func checkBreakers(t *testing.T, s outbox.Store, want ...outbox.Breaker) {
	t.Helper()
	got := mustBreakers(t, s)
	if len(got) != len(want) {
		t.Fatalf("Breakers = %v, want %v", got, want)
	}
	for i := range got {
		if got[i].Peer != want[i].Peer || got[i].Failures != want[i].Failures || !got[i].OpenUntil.Equal(want[i].OpenUntil) {
			t.Errorf("Breakers[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func testBreakers(t *testing.T, s outbox.Store) {
	save := func(b outbox.Breaker) {
		t.Helper()
		if err := s.SaveBreaker(b); err != nil {
			t.Fatalf("SaveBreaker(%+v): %v", b, err)
		}
	}
	checkBreakers(t, s)
	a := outbox.Breaker{Peer: peer(1), Failures: 3, OpenUntil: base.Add(30*time.Second + 9)}
	b := outbox.Breaker{Peer: peer(2), Failures: 1}     // failing, not open yet
	c := outbox.Breaker{Peer: peer(3), OpenUntil: base} // open, no failures counted
	save(c)
	save(a)
	save(b)
	checkBreakers(t, s, a, b, c)
	a.Failures, a.OpenUntil = 4, base.Add(time.Minute)
	save(a)
	checkBreakers(t, s, a, b, c)
	save(outbox.Breaker{Peer: peer(2)}) // closed: deleted
	checkBreakers(t, s, a, c)
	save(outbox.Breaker{Peer: peer(9)}) // closed and unknown: nothing
	checkBreakers(t, s, a, c)
}

func testConcurrentAdd(t *testing.T, s outbox.Store) {
	const workers, each = 32, 16
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	seqs := make(chan uint64, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				e, err := s.Add(entry(uint64(w*each + i)))
				if err != nil {
					errs <- err
					return
				}
				seqs <- e.Seq
			}
		})
	}
	wg.Wait()
	close(errs)
	close(seqs)
	for err := range errs {
		t.Fatalf("concurrent Add: %v", err)
	}
	bySeq := map[uint64]bool{}
	for q := range seqs {
		if bySeq[q] {
			t.Fatalf("Seq %d assigned twice", q)
		}
		bySeq[q] = true
	}
	es := mustEntries(t, s)
	if len(es) != workers*each {
		t.Fatalf("Entries = %d, want %d", len(es), workers*each)
	}
	seen := map[identity.UUID]bool{}
	for i, e := range es {
		if seen[e.ID] {
			t.Fatalf("%s listed twice", e.ID)
		}
		seen[e.ID] = true
		if !bySeq[e.Seq] {
			t.Fatalf("listed Seq %d was not returned by Add", e.Seq)
		}
		if i > 0 && e.Seq <= es[i-1].Seq {
			t.Fatalf("Entries not in Seq order")
		}
		n := binary.BigEndian.Uint64(e.ID[8:])
		if d := diff(e, entry(n)); d != "" {
			t.Fatalf("entry %d: %s", n, d)
		}
	}
}

type deliverFunc func(context.Context, outbox.Attempt) error

func (f deliverFunc) Deliver(ctx context.Context, a outbox.Attempt) error { return f(ctx, a) }

// FarAhead stores in s, an empty store, an entry whose next attempt and
// expiry and whose peer's open breaker are five years ahead (the clock was
// wrong when they were written), then runs an [outbox.Outbox] over the
// store reopen returns (s itself, or s closed and opened again) with a
// fake clock at the right time. The outbox must show the entry and the
// breaker within its policy's bounds and, once the longest of them has
// passed, attempt the entry at once; the peer acknowledges it.
func FarAhead(t *testing.T, s outbox.Store, reopen func() outbox.Store) {
	now := base
	far := now.AddDate(5, 0, 0)
	e := entry(1)
	e.Kind, e.Created, e.Expires, e.NextAttempt = "message", far, far.Add(time.Hour), far
	e = mustAdd(t, s, e)
	if err := s.Attempted(e.ID, 7, far, "connection refused"); err != nil {
		t.Fatalf("Attempted: %v", err)
	}
	e.Attempts, e.NextAttempt, e.LastError = 7, far, "connection refused"
	br := outbox.Breaker{Peer: e.To, Failures: 7, OpenUntil: far}
	if err := s.SaveBreaker(br); err != nil {
		t.Fatalf("SaveBreaker: %v", err)
	}
	checkEntries(t, s, e) // kept as given
	checkBreakers(t, s, br)

	s = reopen()
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	opts := outbox.Options{Backoff: []time.Duration{time.Second, time.Minute}, ResolveBackoff: []time.Duration{30 * time.Second},
		StoredRecheck: time.Second, BreakerOpen: 2 * time.Minute, MaxTTL: time.Hour,
		Now: func() time.Time { return time.Unix(0, clock.Load()) }}
	attempts := make(chan identity.UUID, 10)
	ob, err := outbox.New(s, deliverFunc(func(_ context.Context, a outbox.Attempt) error {
		a.Queued()
		attempts <- a.ID
		return nil
	}), opts)
	if err != nil {
		t.Fatalf("outbox.New: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			ob.Close()
		}
	}()
	b := opts.Bounds()
	ps := ob.Peer(e.To)
	if ps.Breaker != outbox.BreakerOpen || ps.Queued != 1 || ps.OpenUntil.After(now.Add(b.Open)) || ps.NextAttempt.After(now.Add(b.Wait)) {
		t.Fatalf("loaded peer state: breaker %s until %v, %d queued, next attempt %v; want open until %v at most, next attempt %v at most",
			ps.Breaker, ps.OpenUntil, ps.Queued, ps.NextAttempt, now.Add(b.Open), now.Add(b.Wait))
	}
	if l := ob.List(); len(l) != 1 || l[0].Expires.After(now.Add(b.TTL)) {
		t.Fatalf("loaded entries %+v; want one expiring by %v", l, now.Add(b.TTL))
	}
	clock.Store(now.Add(max(b.Open, b.Wait)).UnixNano())
	ob.Start()
	select {
	case got := <-attempts:
		if got != e.ID {
			t.Fatalf("attempted %s, want %s", got, e.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not attempted once the policy's longest wait passed; peer state %+v", ob.Peer(e.To))
	}
	ob.Close() // settles the ack
	closed = true
	checkEntries(t, s)
	checkBreakers(t, s)
}
