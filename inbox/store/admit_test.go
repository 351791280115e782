package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// A batch of many admissions is decided in order and written many rows
// to a statement: duplicates of keys in the dedup table (in every
// statement's worth of lookups), of keys pending in memory and of keys
// earlier in the batch are refused; the others are stored with seqs in
// the order they came, and known as duplicates afterwards, after a
// crash too.
func TestAdmitManyInOneBatch(t *testing.T) {
	testutil.CheckGoroutines(t)
	const n = 3*lookupRows + 5
	ctx := context.Background()
	// The dedup table holds 40 keys (merged at Close).
	first, path := openStore(t, Options{})
	var table, pending []Record
	for i := range 40 {
		table = append(table, rec(1, uint64(i+1)))
		if dup, err := first.Admit(ctx, table[i]); err != nil || dup {
			t.Fatalf("admit: %v %v", dup, err)
		}
	}
	first.Close()
	// Batches of n: a first one leaves n keys pending in memory.
	s := reopen(t, path, Options{FlushInterval: 5 * time.Second, MaxBatch: n, MaxItems: 10000, mergeIdle: noIdleMerge})
	for i := range n {
		pending = append(pending, rec(2, uint64(i+1)))
	}
	admitEach(t, s, false, pending...)
	if rows := dedupRows(t, path); !rows[keyOf(table[39])] || rows[keyOf(pending[0])] || len(s.pending) != n {
		t.Fatalf("want the first 40 keys in the dedup table, the %d after them pending (%d)", n, len(s.pending))
	}
	before := s.lastSeq.Load()

	// Request j: a key of the table, a pending key, a new key, then that
	// new key again.
	var (
		reqs   []*request
		fresh  []Record
		wantOK []bool
	)
	for j := range n {
		var r Record
		switch j % 4 {
		case 0:
			r = table[(j/4)%len(table)]
		case 1:
			r = pending[(j/4)%len(pending)]
		case 2:
			r = rec(3, uint64(j))
			fresh = append(fresh, r)
		case 3:
			r = rec(3, uint64(j-1))
		}
		r.Received = s.opts.Now()
		req := &request{op: opAdmit, rec: r, done: make(chan result, 1)}
		if err := s.send(ctx, req); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req)
		wantOK = append(wantOK, j%4 == 2)
	}
	next := before + 1
	for j, req := range reqs {
		res := <-req.done
		if res.err != nil {
			t.Fatalf("request %d: %v", j, res.err)
		}
		if res.dup == wantOK[j] {
			t.Fatalf("request %d (%s): dup=%v", j, keyOf(req.rec), res.dup)
		}
		if wantOK[j] {
			if res.seq != uint64(next) {
				t.Fatalf("request %d: seq %d, want %d (the order they came in)", j, res.seq, next)
			}
			next++
		}
	}
	if got := s.txns.Load(); got != 2 {
		t.Fatalf("%d transactions, want each batch in one", got)
	}
	rows, err := s.db.Query(`SELECT seq, id FROM items WHERE seq > ? ORDER BY seq`, before)
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	for rows.Next() {
		var seq int64
		var id []byte
		if err := rows.Scan(&seq, &id); err != nil {
			t.Fatal(err)
		}
		if k >= len(fresh) || string(id) != string(fresh[k].ID[:]) || seq != before+1+int64(k) {
			t.Fatalf("item %d: seq %d id %x", k, seq, id)
		}
		k++
	}
	if err := rows.Close(); err != nil || k != len(fresh) {
		t.Fatalf("%d items stored, want %d (%v)", k, len(fresh), err)
	}
	// Known as duplicates by their entries in memory (a batch of n
	// again, so it commits at once) and after a crash.
	again := make([]Record, 0, n)
	for len(again) < n {
		again = append(again, fresh[len(again)%len(fresh)])
	}
	mustDups(t, s, again...)
	crashed := reopen(t, crashCopy(t, path), Options{mergeIdle: noIdleMerge})
	mustDups(t, crashed, append(append(fresh, table...), pending...)...)
}

// An acknowledgement between two admissions of a batch ends a run: the
// second admission of a key sees the item acknowledged. The key's row
// in the dedup table is past the window, so only its unacknowledged
// item made it a duplicate.
func TestAdmitRunEndsAtAck(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock()
	ctx := context.Background()
	first, path := openStore(t, Options{Now: clock.Now})
	k := rec(1, 1)
	if dup, err := first.Admit(ctx, k); err != nil || dup {
		t.Fatalf("admit: %v %v", dup, err)
	}
	first.Close() // merges k into the dedup table
	clock.Advance(DefaultDedupWindow + time.Hour)
	s := reopen(t, path, Options{Now: clock.Now, FlushInterval: 5 * time.Second, MaxBatch: 3, mergeIdle: noIdleMerge})
	if rows := dedupRows(t, path); !rows[keyOf(k)] {
		t.Fatal("k is not in the dedup table")
	}
	k.Received = clock.Now()
	reqs := []*request{
		{op: opAdmit, rec: k, done: make(chan result, 1)},
		{op: opAck, seqs: []uint64{1}, done: make(chan result, 1)},
		{op: opAdmit, rec: k, done: make(chan result, 1)},
	}
	for _, req := range reqs {
		if err := s.send(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	var got []result
	for _, req := range reqs {
		got = append(got, <-req.done)
	}
	if got[0].err != nil || !got[0].dup {
		t.Fatalf("first admission: dup=%v err=%v, want a duplicate (its item unacknowledged)", got[0].dup, got[0].err)
	}
	if got[1].err != nil || got[1].n != 1 {
		t.Fatalf("ack: %d acknowledged, err=%v", got[1].n, got[1].err)
	}
	if got[2].err != nil || got[2].dup || got[2].seq != 2 {
		t.Fatalf("second admission: dup=%v seq=%d err=%v, want stored as seq 2", got[2].dup, got[2].seq, got[2].err)
	}
}

// A full store still answers a duplicate as one, whether its key is
// pending in memory or in the dedup table; anything new gets ErrFull.
func TestFullStillKnowsDuplicates(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{MaxItems: 2, mergeIdle: noIdleMerge})
	ctx := context.Background()
	a, b, c := rec(1, 1), rec(1, 2), rec(1, 3)
	for _, r := range []Record{a, b} {
		if dup, err := s.Admit(ctx, r); err != nil || dup {
			t.Fatalf("admit %s: %v %v", keyOf(r), dup, err)
		}
	}
	check := func(when string) {
		t.Helper()
		if dup, err := s.Admit(ctx, c); !errors.Is(err, ErrFull) || dup {
			t.Fatalf("%s: a new key: dup=%v err=%v, want ErrFull", when, dup, err)
		}
		mustDups(t, s, a, b)
	}
	check("keys pending")
	if _, _, err := s.Expire(); err != nil { // merges them into the table
		t.Fatal(err)
	}
	if rows := dedupRows(t, path); !rows[keyOf(a)] || !rows[keyOf(b)] || len(s.pending) != 0 {
		t.Fatal("want a and b in the dedup table, nothing pending")
	}
	check("keys in the table")
}
