package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/internal/testutil"
)

// noIdleMerge keeps the duplicate filter's keys pending for the length
// of a test: only mergeAt, Expire, the history cap and Close merge.
const noIdleMerge = time.Hour

// crashCopy copies the database and its WAL at path, as they are on disk
// now, to a fresh directory, and returns the copy's path: the files a
// process killed at this point leaves behind. The store must be idle.
func crashCopy(t *testing.T, path string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "inbox.db")
	for _, suffix := range []string{"", "-wal"} {
		in, err := os.Open(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(dst+suffix, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// mergeMark reads the merge mark (meta dedup_merged) behind the store's
// back.
func mergeMark(t *testing.T, path string) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mark int64
	if err := db.QueryRow(`SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'dedup_merged'`).Scan(&mark); err != nil {
		t.Fatal(err)
	}
	return mark
}

// dedupRows returns the (sender byte 0, id) of every row of the dedup
// table, read behind the store's back.
func dedupRows(t *testing.T, path string) map[string]bool {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT sender, id FROM dedup`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var sender, id []byte
		if err := rows.Scan(&sender, &id); err != nil {
			t.Fatal(err)
		}
		got[fmt.Sprintf("%d/%x", sender[0], id)] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func keyOf(r Record) string { return fmt.Sprintf("%d/%x", r.Sender[0], r.ID) }

// mustDups admits every record of rs again, all queued at once, and fails
// unless each is a duplicate.
func mustDups(t *testing.T, s *Store, rs ...Record) {
	t.Helper()
	admitEach(t, s, true, rs...)
}

// admitEach admits every record of rs, all queued at once from this
// goroutine, and fails unless each is a duplicate (wantDup) or stored.
func admitEach(t *testing.T, s *Store, wantDup bool, rs ...Record) {
	t.Helper()
	ps := make([]*Pending, len(rs))
	for i, r := range rs {
		ps[i] = s.AdmitAsync(r, queueWait)
	}
	for i, p := range ps {
		if dup, err := p.Wait(); err != nil || dup != wantDup {
			t.Fatalf("Admit(%s): dup=%v err=%v, want dup=%v", keyOf(rs[i]), dup, err, wantDup)
		}
	}
}

// The keys of admitted items are held in memory and reach the dedup
// table only when merged; a duplicate is recognised before and after.
func TestDedupPendingThenMerged(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{mergeIdle: noIdleMerge})
	rs := []Record{rec(1, 1), rec(1, 2), rec(2, 1)}
	for _, r := range rs {
		mustAdmit(t, s, r)
	}
	if got := dedupRows(t, path); len(got) != 0 {
		t.Fatalf("dedup rows before a merge: %v, want none (the keys are pending)", got)
	}
	mustDups(t, s, rs...)
	if _, err := s.Ack(1); err != nil { // acknowledged, still a duplicate
		t.Fatal(err)
	}
	mustDup(t, s, rs[0])
	s.Close()
	got := dedupRows(t, path)
	for _, r := range rs {
		if !got[keyOf(r)] {
			t.Fatalf("after Close the dedup table lacks %s: %v", keyOf(r), got)
		}
	}
	s = reopen(t, path, Options{mergeIdle: noIdleMerge})
	mustDups(t, s, rs...)
}

// mergeAt keys waiting are merged with the batch that reached it; the
// idle committer merges what is left.
func TestDedupMergeAtAndIdle(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{mergeAt: 4, mergeIdle: 300 * time.Millisecond})
	for n := range uint64(3) {
		mustAdmit(t, s, rec(1, n))
	}
	txns := s.txns.Load()
	// The idle merge writes the three.
	testutil.WaitFor(t, 10*time.Second, "the idle merge", func() bool { return len(dedupRows(t, path)) == 3 })
	s2, path2 := openStore(t, Options{mergeAt: 4, mergeIdle: noIdleMerge})
	for n := range uint64(6) {
		mustAdmit(t, s2, rec(1, n))
	}
	// Admissions one at a time: the fourth made four wait, and its batch
	// merged them; the fifth and sixth are pending.
	if got := len(dedupRows(t, path2)); got != 4 {
		t.Fatalf("%d dedup rows after 6 admissions with mergeAt 4, want 4", got)
	}
	for n := range uint64(6) {
		mustDup(t, s2, rec(1, n)) // one at a time: a batch of them would reach mergeAt
	}
	if got := s.txns.Load(); got != txns {
		t.Fatalf("the idle merge counted as a request's transaction: %d, then %d", txns, got)
	}
}

// Once mergeAt keys wait, they are merged in slices, a range of keys
// after each batch, and the mark moves only with the last slice: a crash
// half-way leaves every key to Open. A key admitted again meanwhile is
// left pending, with its newer entry.
func TestDedupMergeInSlices(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock()
	opts := Options{Now: clock.Now, DedupWindow: time.Hour, mergeAt: 4, mergeSlice: 1, mergeIdle: noIdleMerge}
	s, path := openStore(t, opts)
	again, r1, r2, r3 := rec(1, 100), rec(1, 1), rec(1, 2), rec(1, 3)
	mustAdmit(t, s, again) // seq 1
	mustAdmit(t, s, r1)    // seq 2
	mustAdmit(t, s, r2)    // seq 3
	if _, err := s.Ack(1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	// Four keys wait: a merge of them in key order (r1, r2, r3, again),
	// one a slice, starts after this batch.
	mustAdmit(t, s, r3)    // seq 4
	mustAdmit(t, s, again) // seq 5: past its window, admitted again
	// One or two slices are written, and the mark has not moved.
	if m := mergeMark(t, path); m != 0 {
		t.Fatalf("merge mark %d half-way through the slices, want 0", m)
	}
	if got := dedupRows(t, path); !got[keyOf(r1)] || len(got) > 2 || len(got) == 2 && !got[keyOf(r2)] {
		t.Fatalf("dedup rows %v half-way, want r1 and perhaps r2: the keys in order", got)
	}
	// Each duplicate is a request; after the third, the last slice is
	// written.
	mustDup(t, s, r1)
	mustDup(t, s, r2)
	mustDup(t, s, r3)
	got := dedupRows(t, path)
	if len(got) != 3 || !got[keyOf(r1)] || !got[keyOf(r2)] || !got[keyOf(r3)] {
		t.Fatalf("dedup rows %v after the slices, want r1, r2, r3 (again is pending)", got)
	}
	if m := mergeMark(t, path); m != 4 {
		t.Fatalf("merge mark %d after the slices, want 4", m)
	}
	if n := len(s.pending); n != 1 {
		t.Fatalf("%d keys pending after the slices, want 1 (again)", n)
	}
	mustDups(t, reopen(t, crashCopy(t, path), opts), again, r1, r2, r3)
	mustDups(t, s, again, r1, r2, r3)
}

// A process that stopped before merging leaves the keys only in items:
// the next Open writes their dedup rows, so none of them, acknowledged or
// not, is admitted twice.
func TestDedupRecoveredAfterCrash(t *testing.T) {
	testutil.CheckGoroutines(t)
	opts := Options{mergeIdle: noIdleMerge}
	s, path := openStore(t, opts)
	rs := []Record{rec(1, 1), rec(1, 2), rec(3, 7)}
	for _, r := range rs {
		mustAdmit(t, s, r)
	}
	if _, err := s.Ack(1); err != nil {
		t.Fatal(err)
	}
	crashed := crashCopy(t, path)
	if got := dedupRows(t, crashed); len(got) != 0 {
		t.Fatalf("the crashed copy has dedup rows %v: nothing to recover", got)
	}
	c := reopen(t, crashed, opts)
	if mark := mergeMark(t, crashed); mark != 3 {
		t.Fatalf("merge mark after recovery = %d, want 3 (the last item)", mark)
	}
	got := dedupRows(t, crashed)
	for _, r := range rs {
		if !got[keyOf(r)] {
			t.Fatalf("Open did not recover %s: %v", keyOf(r), got)
		}
	}
	mustDups(t, c, rs...)
	// The sequence goes on.
	mustAdmit(t, c, rec(1, 3))
	if got := fmt.Sprint(seqsOf(mustList(t, c, 0, 0))); got != "[2 3 4]" {
		t.Fatalf("List after recovery = %s, want [2 3 4]", got)
	}
}

// Items deleted for the history cap take their keys to the table first:
// after a crash, a trimmed item's key is still known.
func TestDedupMergedBeforeTrim(t *testing.T) {
	testutil.CheckGoroutines(t)
	opts := Options{mergeIdle: noIdleMerge, HistoryMaxBytes: 40}
	s, path := openStore(t, opts)
	var rs []Record
	for n := range uint64(8) {
		r := rec(1, n)
		r.Payload = make([]byte, 10)
		rs = append(rs, r)
		mustAdmit(t, s, r)
	}
	if n, err := s.Ack(1, 2, 3, 4, 5, 6, 7, 8); err != nil || n != 8 {
		t.Fatalf("Ack = %d, %v", n, err)
	}
	var left int
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM items`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if left >= 8 {
		t.Fatalf("%d items left: the history cap trimmed none", left)
	}
	mustDups(t, reopen(t, crashCopy(t, path), opts), rs...)
}

// Expire merges before it deletes, and keeps the window's rule for the
// keys it merged: an acknowledged item older than the window may come
// again, an unacknowledged one never.
func TestDedupExpireMerges(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock()
	opts := Options{Now: clock.Now, DedupWindow: time.Hour, mergeIdle: noIdleMerge}
	s, path := openStore(t, opts)
	acked, unacked := rec(1, 1), rec(1, 2)
	mustAdmit(t, s, acked)
	mustAdmit(t, s, unacked)
	if _, err := s.Ack(1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	// Pending and past the window: the unacknowledged one is still a
	// duplicate.
	mustDup(t, s, unacked)
	if _, _, err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	got := dedupRows(t, path)
	if got[keyOf(acked)] || !got[keyOf(unacked)] {
		t.Fatalf("dedup rows after Expire: %v, want only the unacknowledged %s", got, keyOf(unacked))
	}
	mustDup(t, s, unacked)
	mustAdmit(t, s, acked)
}

// A batch whose transaction failed leaves no key pending: an admission
// that went through before another in its batch failed was not stored
// either, and may come again.
func TestDedupFailedBatchLeavesNothing(t *testing.T) {
	testutil.CheckGoroutines(t)
	// Batches of two: a small record, then a large one, until the large
	// one fills the "disk" and fails their transaction.
	s, _ := openStore(t, Options{pragmas: "&_pragma=max_page_count(64)", FlushInterval: time.Hour, MaxBatch: 2, mergeIdle: noIdleMerge})
	var small Record
	var err error
	for n := uint64(1); n <= 1000 && err == nil; n++ {
		small = rec(2, n)
		ps := s.AdmitAsync(small, queueWait)
		pb := s.AdmitAsync(bigRec(1, n, 8<<10), queueWait)
		_, err = pb.Wait()
		if _, serr := ps.Wait(); (serr == nil) != (err == nil) {
			t.Fatalf("one batch, two outcomes: small %v, large %v", serr, err)
		}
	}
	if err == nil || errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "full") {
		t.Fatalf("admitting past the page limit: %v, want a failed write", err)
	}
	// The committer answered and waits: its map is ours to read.
	if _, ok := s.pending[makeDedupKey(&small)]; ok {
		t.Fatalf("the small admission of the failed batch is pending")
	}
	if len(s.pending) == 0 {
		t.Fatalf("no key pending: the admissions before the failure should be")
	}
}

// A merge in the middle of a batch (Expire's) writes the keys admitted
// before it; those admitted after it in the same batch stay pending, and
// the mark covers only the former: after a crash every key is known.
func TestDedupMergeMidBatch(t *testing.T) {
	testutil.CheckGoroutines(t)
	// Batches of three: what one goroutine queues at once shares one.
	opts := Options{FlushInterval: 2 * time.Second, MaxBatch: 3, mergeIdle: noIdleMerge}
	s, path := openStore(t, opts)
	early, a, b, c := rec(1, 1), rec(2, 1), rec(2, 2), rec(2, 3)
	// The first batch: early, a, then Expire merging them (mark 2).
	mustAdmitBatch(t, s, early, a)
	// The second: b, Expire merging it (mark 3), then c after the merge.
	mustAdmitBatch(t, s, b, Record{}, c)
	if got := dedupRows(t, path); got[keyOf(c)] || !got[keyOf(b)] || !got[keyOf(early)] {
		t.Fatalf("dedup rows %v: want early, a and b merged by the Expires, c (after the second in its batch) pending", got)
	}
	if mark := mergeMark(t, path); mark != 3 {
		t.Fatalf("merge mark %d, want 3 (b's seq; c, seq 4, came after the merge)", mark)
	}
	mustDups(t, s, early, a, b, c)
	crashed := reopen(t, crashCopy(t, path), Options{mergeIdle: noIdleMerge})
	mustDups(t, crashed, early, a, b, c)
}

// mustAdmitBatch queues, from this goroutine, an admission of each record
// of rs, or an Expire for a Record without a Kind, then an Expire if none was
// asked for, and fails unless every admission stores its record and the
// Expires succeed. With Options.MaxBatch at their number they share one
// batch, in that order.
func mustAdmitBatch(t *testing.T, s *Store, rs ...Record) {
	t.Helper()
	ctx := context.Background()
	if !slices.ContainsFunc(rs, func(r Record) bool { return r.Kind == "" }) {
		rs = append(rs, Record{})
	}
	var reqs []*request
	for _, r := range rs {
		req := &request{op: opAdmit, rec: r, done: make(chan result, 1)}
		if r.Kind == "" {
			req = &request{op: opExpire, done: make(chan result, 1)}
		} else {
			req.rec.Received = s.opts.Now()
		}
		if err := s.send(ctx, req); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req)
	}
	for i, req := range reqs {
		if res := <-req.done; res.err != nil || res.dup {
			t.Fatalf("request %d of the batch (op %d): dup=%v err=%v", i, req.op, res.dup, res.err)
		}
	}
}

// A crash does not shorten a key's window: the keys recovered are first
// seen when the node opens again, never earlier than their admission,
// whatever time the record says it was received.
func TestDedupRecoveryKeepsTheWindow(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock()
	opts := Options{Now: clock.Now, DedupWindow: time.Hour, mergeIdle: noIdleMerge}
	s, path := openStore(t, opts)
	r := rec(1, 1)
	r.Received = clock.Now().Add(-2 * time.Hour) // received long before it was admitted
	mustAdmit(t, s, r)
	if _, err := s.Ack(1); err != nil {
		t.Fatal(err)
	}
	mustDup(t, s, r)
	c := reopen(t, crashCopy(t, path), opts)
	mustDup(t, c, r)
	clock.Advance(61 * time.Minute)
	mustAdmit(t, c, r) // the window, from the recovery, has passed
}

// A merge writes its keys many to a statement (mergeRows), the last
// statement padded with its last key again: every key reaches the table
// once, with its own item's seq and when it was first seen.
func TestDedupMergeManyKeys(t *testing.T) {
	testutil.CheckGoroutines(t)
	for _, n := range []int{1, mergeRows - 1, mergeRows, mergeRows + 1, 2*mergeRows + 22} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			clock := newFakeClock()
			s, path := openStore(t, Options{Now: clock.Now, mergeIdle: noIdleMerge})
			rs := make([]Record, n)
			for i := range rs {
				rs[i] = rec(byte(1+i%3), uint64(i))
			}
			admitEach(t, s, false, rs...)
			s.Close() // merges
			db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var rows, matched, timed int
			if err := db.QueryRow(`SELECT count(*),
				count(*) FILTER (WHERE EXISTS (SELECT 1 FROM items i WHERE i.seq = d.seq AND i.sender = d.sender AND i.id = d.id)),
				count(*) FILTER (WHERE d.first_seen = ?)
				FROM dedup d`, clock.Now().UnixNano()).Scan(&rows, &matched, &timed); err != nil {
				t.Fatal(err)
			}
			if rows != n || matched != n || timed != n {
				t.Fatalf("%d keys merged: %d rows, %d with their item's seq, %d first seen at admission", n, rows, matched, timed)
			}
			s = reopen(t, path, Options{Now: clock.Now, mergeIdle: noIdleMerge})
			admitEach(t, s, true, rs...)
		})
	}
}
