package store

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"
)

// bigRec is rec(sender, n) with a payload of size bytes.
func bigRec(sender byte, n uint64, size int) Record {
	r := rec(sender, n)
	r.Payload = append(r.Payload, bytes.Repeat([]byte{byte(n)}, size-len(r.Payload))...)
	return r
}

// fileSize returns the size of the database file and its WAL.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		fi, err := os.Stat(p)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

func historySeqs(t *testing.T, s *Store) []uint64 {
	t.Helper()
	rows, err := s.db.Query(`SELECT seq FROM items WHERE acked_at IS NOT NULL ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var seq uint64
		if err := rows.Scan(&seq); err != nil {
			t.Fatal(err)
		}
		out = append(out, seq)
	}
	return out
}

// Acknowledged history over Options.HistoryMaxBytes is trimmed, oldest
// acknowledgement first, down to 9/10 of the cap; unacknowledged items
// are never touched, however large.
func TestHistoryByteCap(t *testing.T) {
	clock := newFakeClock()
	const size = 10 << 10
	// Opened without a cap, filled, then reopened with one: Expire trims.
	s, path := openStore(t, Options{Now: clock.Now, HistoryMaxBytes: -1})
	for n := uint64(1); n <= 30; n++ {
		mustAdmit(t, s, bigRec(1, n, size))
	}
	for n := uint64(1); n <= 20; n++ { // acked in order: 1 is the oldest
		clock.Advance(time.Second)
		if _, err := s.Ack(n); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = reopen(t, path, Options{Now: clock.Now, HistoryMaxBytes: 10 * size})
	_, history, err := s.Expire()
	if err != nil {
		t.Fatal(err)
	}
	// 9/10 of the cap holds 9 items: the 11 oldest go.
	if history != 11 {
		t.Fatalf("Expire deleted %d history items, want 11", history)
	}
	if got, want := fmt.Sprint(historySeqs(t, s)), fmt.Sprint([]uint64{12, 13, 14, 15, 16, 17, 18, 19, 20}); got != want {
		t.Fatalf("history left: %s, want %s", got, want)
	}
	if got := seqsOf(mustList(t, s, 0, 0)); len(got) != 10 || got[0] != 21 {
		t.Fatalf("unacknowledged after the trim: %v, want 21..30", got)
	}

	// Acknowledging past the cap trims at once, without waiting for Expire.
	for n := uint64(21); n <= 30; n++ {
		clock.Advance(time.Second)
		if _, err := s.Ack(n); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := fmt.Sprint(historySeqs(t, s)), fmt.Sprint([]uint64{22, 23, 24, 25, 26, 27, 28, 29, 30}); got != want {
		t.Fatalf("history after acks past the cap: %s, want %s", got, want)
	}
	if s.history != 9*size {
		t.Fatalf("history bytes counted %d, want %d", s.history, 9*size)
	}
}

// A store never trims unacknowledged items to make room: over any history
// cap, admissions are refused by MaxBytes instead.
func TestHistoryCapKeepsUnacked(t *testing.T) {
	const size = 4 << 10
	s, _ := openStore(t, Options{HistoryMaxBytes: 1, MaxBytes: 8 * size})
	for n := uint64(1); n <= 8; n++ {
		mustAdmit(t, s, bigRec(1, n, size))
	}
	if _, err := s.Admit(t.Context(), bigRec(1, 9, size)); err == nil {
		t.Fatal("admission past MaxBytes succeeded")
	}
	if _, _, err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	if n := mustLen(t, s); n != 8 {
		t.Fatalf("Len after Expire = %d, want 8", n)
	}
	if _, err := s.Ack(1); err != nil {
		t.Fatal(err)
	}
	if h := historySeqs(t, s); len(h) != 0 {
		t.Fatalf("history over a 1-byte cap: %v", h)
	}
	if n := mustLen(t, s); n != 7 {
		t.Fatalf("Len after the trim = %d, want 7", n)
	}
}

// Deleting history gives the space back to the file system: the file and
// its WAL shrink after Expire, and DiskSize reports it.
func TestExpireShrinksFile(t *testing.T) {
	clock := newFakeClock()
	const size = 64 << 10
	s, path := openStore(t, Options{Now: clock.Now, HistoryRetention: time.Hour})
	for n := uint64(1); n <= 100; n++ {
		mustAdmit(t, s, bigRec(1, n, size))
		if _, err := s.Ack(n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	before := fileSize(t, path)
	if before < 100*size {
		t.Fatalf("file with 100 items of %d bytes: %d bytes", size, before)
	}
	ds, err := s.DiskSize()
	if err != nil || ds != before {
		t.Fatalf("DiskSize = %d, %v; want %d", ds, err, before)
	}
	clock.Advance(2 * time.Hour)
	if _, history, err := s.Expire(); err != nil || history != 100 {
		t.Fatalf("Expire: %d history, %v; want 100", history, err)
	}
	after := fileSize(t, path)
	if after > before/10 {
		t.Fatalf("file after deleting every item: %d bytes (was %d), want under a tenth", after, before)
	}
	if ds, err := s.DiskSize(); err != nil || ds != after {
		t.Fatalf("DiskSize = %d, %v; want %d", ds, err, after)
	}
}
