package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

func mustAdmit(t *testing.T, s *Store, r Record) {
	t.Helper()
	dup, err := s.Admit(context.Background(), r)
	if err != nil || dup {
		t.Fatalf("Admit(%x): dup=%v err=%v", r.ID, dup, err)
	}
}

func mustDup(t *testing.T, s *Store, r Record) {
	t.Helper()
	dup, err := s.Admit(context.Background(), r)
	if err != nil || !dup {
		t.Fatalf("Admit(%x) again: dup=%v err=%v, want a duplicate", r.ID, dup, err)
	}
}

func mustList(t *testing.T, s *Store, after uint64, limit int) []Record {
	t.Helper()
	rs, err := s.List(after, limit)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return rs
}

func mustLen(t *testing.T, s *Store) int {
	t.Helper()
	n, err := s.Len()
	if err != nil {
		t.Fatalf("Len: %v", err)
	}
	return n
}

func TestAdmitListAck(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock()
	s, _ := openStore(t, Options{Now: clock.Now})

	a, b, c := rec(1, 1), rec(1, 2), rec(2, 1)
	a.Received = time.Date(2025, 5, 6, 7, 8, 9, 123456789, time.UTC)
	b.Kind, b.Peer = "request", "bob"
	c.Payload = nil
	for _, r := range []Record{a, b, c} {
		mustAdmit(t, s, r)
	}
	rs := mustList(t, s, 0, 0)
	if got := fmt.Sprint(seqsOf(rs)); got != "[1 2 3]" {
		t.Fatalf("List = %s", got)
	}
	want := []Record{a, b, c}
	want[1].Received = clock.Now() // zero Received is filled in
	want[2].Received = clock.Now()
	for i, r := range rs {
		w := want[i]
		if r.Sender != w.Sender || r.ID != w.ID || r.Kind != w.Kind || r.Peer != w.Peer ||
			!r.Received.Equal(w.Received) || !bytes.Equal(r.Payload, w.Payload) {
			t.Errorf("record %d = %+v, want %+v", i, r, w)
		}
	}
	if got := fmt.Sprint(seqsOf(mustList(t, s, 1, 1))); got != "[2]" {
		t.Fatalf("List(after 1, limit 1) = %s", got)
	}
	if got := mustList(t, s, 3, 0); len(got) != 0 {
		t.Fatalf("List(after 3) = %v", got)
	}
	if n := mustLen(t, s); n != 3 {
		t.Fatalf("Len = %d", n)
	}
	if n, err := s.Ack(2, 2, 99, 0); err != nil || n != 1 {
		t.Fatalf("Ack(2, 2, 99, 0) = %d, %v", n, err)
	}
	if n, err := s.Ack(2); err != nil || n != 0 {
		t.Fatalf("second Ack(2) = %d, %v", n, err)
	}
	if n, err := s.Ack(); err != nil || n != 0 {
		t.Fatalf("Ack() = %d, %v", n, err)
	}
	if got := fmt.Sprint(seqsOf(mustList(t, s, 0, 0))); got != "[1 3]" {
		t.Fatalf("after ack: %s", got)
	}
	if n := mustLen(t, s); n != 2 {
		t.Fatalf("Len after ack = %d", n)
	}
	// An acknowledged item is still a duplicate.
	mustDup(t, s, b)
}

func TestDedupSeparateBatches(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	r := rec(1, 1)
	mustAdmit(t, s, r)
	mustDup(t, s, r)
	// Same ID from another sender is a different envelope.
	mustAdmit(t, s, rec(2, 1))
	// A duplicate changes nothing, even with a different payload.
	r.Payload = []byte("other")
	mustDup(t, s, r)
	if n := mustLen(t, s); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
}

func TestDedupSameBatch(t *testing.T) {
	testutil.CheckGoroutines(t)
	// A batch flushes only when it holds MaxBatch requests, so the
	// admissions below share one transaction.
	const n = 4
	s, _ := openStore(t, Options{FlushInterval: time.Hour, MaxBatch: n})
	r := rec(1, 1)
	var wg sync.WaitGroup
	dups := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { dups[i], errs[i] = s.Admit(context.Background(), r) })
	}
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Admit %d: %v", i, errs[i])
		}
		if !dups[i] {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d admissions stored, want 1 (dups %v)", fresh, dups)
	}
	if got := s.txns.Load(); got != 1 {
		t.Fatalf("%d transactions, want 1", got)
	}
	if n := mustLen(t, s); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}
}

func TestRestart(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock()
	opts := Options{Now: clock.Now}
	s, path := openStore(t, opts)
	for i := range uint64(4) {
		mustAdmit(t, s, rec(1, i))
	}
	// Acknowledge the newest and expire it from history, so no row holds
	// the largest sequence: it must still not be reused.
	if n, err := s.Ack(1, 4); err != nil || n != 2 {
		t.Fatalf("Ack = %d, %v", n, err)
	}
	clock.Advance(DefaultHistoryRetention + time.Hour)
	if _, h, err := s.Expire(); err != nil || h != 2 {
		t.Fatalf("Expire: history %d, %v; want 2", h, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, path, opts)
	if got := fmt.Sprint(seqsOf(mustList(t, s, 0, 0))); got != "[2 3]" {
		t.Fatalf("after restart List = %s", got)
	}
	if n := mustLen(t, s); n != 2 {
		t.Fatalf("after restart Len = %d", n)
	}
	// Dedup survives the restart for an unacknowledged item.
	mustDup(t, s, rec(1, 2))
	mustAdmit(t, s, rec(1, 100))
	if got := fmt.Sprint(seqsOf(mustList(t, s, 3, 0))); got != "[5]" {
		t.Fatalf("sequence after restart: %s, want [5]", got)
	}
}

func TestDedupAcrossRestart(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	acked, unacked := rec(1, 1), rec(1, 2)
	mustAdmit(t, s, acked)
	mustAdmit(t, s, unacked)
	if _, err := s.Ack(1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, path, Options{})
	mustDup(t, s, acked)
	mustDup(t, s, unacked)
	if got := fmt.Sprint(seqsOf(mustList(t, s, 0, 0))); got != "[2]" {
		t.Fatalf("List = %s", got)
	}
}

func TestFull(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{MaxItems: 2})
	mustAdmit(t, s, rec(1, 1))
	mustAdmit(t, s, rec(1, 2))
	_, err := s.Admit(context.Background(), rec(1, 3))
	if !errors.Is(err, ErrFull) || !errors.Is(err, inbox.ErrFull) {
		t.Fatalf("Admit to full store: %v", err)
	}
	// A refused record was not remembered, and a duplicate of a stored one
	// is still recognised while full.
	mustDup(t, s, rec(1, 1))
	if n, err := s.Ack(1); err != nil || n != 1 {
		t.Fatalf("Ack = %d, %v", n, err)
	}
	// Still full: one item left is not under the low-water mark (90% of
	// 2, at least 1), so the refused record's sender retries later.
	if _, err := s.Admit(context.Background(), rec(1, 3)); !errors.Is(err, ErrFull) {
		t.Fatalf("Admit above the low-water mark: %v", err)
	}
	if n, err := s.Ack(2); err != nil || n != 1 {
		t.Fatalf("Ack = %d, %v", n, err)
	}
	mustAdmit(t, s, rec(1, 3))
	mustAdmit(t, s, rec(1, 4))
	if _, err := s.Admit(context.Background(), rec(1, 5)); !errors.Is(err, ErrFull) {
		t.Fatalf("Admit to full store again: %v", err)
	}
	if n := mustLen(t, s); n != 2 {
		t.Fatalf("Len = %d", n)
	}
}

// Once a record was refused for lack of room, a smaller one behind it is
// refused too, though it would fit: the sender retries both in its order.
func TestFullKeepsOrder(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{MaxItems: 100, MaxBytes: 1000})
	big, bigger, small := rec(1, 1), rec(1, 2), rec(1, 3)
	big.Payload, bigger.Payload, small.Payload = make([]byte, 800), make([]byte, 300), make([]byte, 50)
	mustAdmit(t, s, big)
	if _, err := s.Admit(context.Background(), bigger); !errors.Is(err, ErrFull) {
		t.Fatalf("300 bytes over a 1000-byte limit holding 800: %v", err)
	}
	if _, err := s.Admit(context.Background(), small); !errors.Is(err, ErrFull) {
		t.Fatalf("50 bytes behind a refused record: %v, want ErrFull", err)
	}
	if _, err := s.Ack(1); err != nil {
		t.Fatal(err)
	}
	mustAdmit(t, s, bigger)
	mustAdmit(t, s, small)
	if got := fmt.Sprint(seqsOf(mustList(t, s, 0, 0))); got != "[2 3]" {
		t.Fatalf("List = %s, want the two in their order", got)
	}
}

func TestFullCountsBatch(t *testing.T) {
	testutil.CheckGoroutines(t)
	// Three admissions in one transaction against room for two.
	s, _ := openStore(t, Options{MaxItems: 2, MaxBatch: 3, FlushInterval: time.Hour})
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { _, errs[i] = s.Admit(context.Background(), rec(1, uint64(i))) })
	}
	wg.Wait()
	full := 0
	for _, err := range errs {
		switch {
		case errors.Is(err, ErrFull):
			full++
		case err != nil:
			t.Fatalf("Admit: %v", err)
		}
	}
	if full != 1 || mustLen(t, s) != 2 || s.txns.Load() != 1 {
		t.Fatalf("full=%d len=%d txns=%d, want 1, 2, 1", full, mustLen(t, s), s.txns.Load())
	}
}

func TestGroupCommit(t *testing.T) {
	testutil.CheckGoroutines(t)
	const n = 500
	s, _ := openStore(t, Options{FlushInterval: 10 * time.Millisecond})
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			if _, err := s.Admit(context.Background(), rec(byte(i%7), uint64(i))); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := mustLen(t, s); got != n {
		t.Fatalf("Len = %d, want %d", got, n)
	}
	txns := s.txns.Load()
	t.Logf("%d admissions in %d transactions", n, txns)
	if txns > n/10 {
		t.Fatalf("%d transactions for %d admissions: not grouped", txns, n)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestChanged(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})

	woke := make(chan struct{})
	c := s.Changed()
	go func() {
		<-c
		close(woke)
	}()
	mustAdmit(t, s, rec(1, 1))
	select {
	case <-woke:
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by a commit")
	}

	// A commit that adds nothing (only a duplicate) does not fire.
	c = s.Changed()
	mustDup(t, s, rec(1, 1))
	if isClosed(c) {
		t.Fatal("Changed fired for a duplicate")
	}
	// Neither does an ack of nothing.
	if _, err := s.Ack(42); err != nil {
		t.Fatal(err)
	}
	if isClosed(c) {
		t.Fatal("Changed fired for an empty ack")
	}

	woke = make(chan struct{})
	go func() {
		<-c
		close(woke)
	}()
	if _, err := s.Ack(1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woke:
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by an ack")
	}

	c = s.Changed()
	s.Close()
	if !isClosed(c) || !isClosed(s.Changed()) {
		t.Fatal("Changed not closed by Close")
	}
}

func TestExpire(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock()
	s, _ := openStore(t, Options{Now: clock.Now, DedupWindow: time.Hour, HistoryRetention: 24 * time.Hour})
	a, b := rec(1, 1), rec(1, 2)
	mustAdmit(t, s, a) // seq 1
	mustAdmit(t, s, b) // seq 2, never acknowledged
	if _, err := s.Ack(1); err != nil {
		t.Fatal(err)
	}
	if d, h, err := s.Expire(); err != nil || d != 0 || h != 0 {
		t.Fatalf("early Expire = %d, %d, %v", d, h, err)
	}

	// Past the dedup window: a's row goes; b's stays while b is unacked.
	clock.Advance(2 * time.Hour)
	if d, h, err := s.Expire(); err != nil || d != 1 || h != 0 {
		t.Fatalf("Expire after dedup window = %d, %d, %v; want 1, 0", d, h, err)
	}
	mustAdmit(t, s, a) // seq 3: no longer a duplicate
	mustDup(t, s, b)

	// Past a's (first) history retention.
	clock.Advance(23 * time.Hour)
	if d, h, err := s.Expire(); err != nil || d != 0 || h != 1 {
		t.Fatalf("Expire after history retention = %d, %d, %v; want 0, 1", d, h, err)
	}
	if got := fmt.Sprint(seqsOf(mustList(t, s, 0, 0))); got != "[2 3]" {
		t.Fatalf("unacked items after Expire: %s", got)
	}
	mustDup(t, s, a)
	mustDup(t, s, b)

	// Far in the future, unacked items and their dedup rows remain.
	clock.Advance(1000 * time.Hour)
	if d, h, err := s.Expire(); err != nil || d != 0 || h != 0 {
		t.Fatalf("late Expire = %d, %d, %v", d, h, err)
	}
	if got := fmt.Sprint(seqsOf(mustList(t, s, 0, 0))); got != "[2 3]" {
		t.Fatalf("unacked items after late Expire: %s", got)
	}
	mustDup(t, s, b)
}

func TestDedupWindowWithoutExpire(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock()
	s, _ := openStore(t, Options{Now: clock.Now, DedupWindow: time.Hour})
	r := rec(1, 1)
	mustAdmit(t, s, r)
	if _, err := s.Ack(1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * time.Minute)
	mustDup(t, s, r)
	clock.Advance(31 * time.Minute)
	mustAdmit(t, s, r) // the window passed even though Expire never ran
	mustDup(t, s, r)   // and it starts again
}

func TestCloseWithPending(t *testing.T) {
	testutil.CheckGoroutines(t)
	// With a flush interval of an hour, batches of 8 flush when full; the
	// remainder (n is not a multiple of 8) can only complete through Close.
	const n = 43
	s, path := openStore(t, Options{FlushInterval: time.Hour, MaxBatch: 8})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			dup, err := s.Admit(context.Background(), rec(1, uint64(i)))
			if dup {
				err = errors.New("unexpected duplicate")
			}
			errs[i] = err
		})
	}
	testutil.WaitFor(t, 10*time.Second, "a first batch", func() bool { return s.txns.Load() > 0 })
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("admissions still blocked after Close")
	}
	stored := map[uint64]bool{}
	for i, err := range errs {
		switch {
		case err == nil:
			stored[uint64(i)] = true
		case errors.Is(err, ErrClosed):
		default:
			t.Fatalf("Admit %d: %v", i, err)
		}
	}
	t.Logf("%d of %d admissions committed during Close", len(stored), n)
	if len(stored) == 0 {
		t.Fatal("no admission committed")
	}

	// Every method now reports ErrClosed; Close again is fine.
	if _, err := s.Admit(context.Background(), rec(9, 9)); !errors.Is(err, ErrClosed) {
		t.Errorf("Admit after Close: %v", err)
	}
	if _, err := s.List(0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("List after Close: %v", err)
	}
	if _, err := s.Ack(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Ack after Close: %v", err)
	}
	if _, err := s.Ack(); !errors.Is(err, ErrClosed) {
		t.Errorf("Ack() after Close: %v", err)
	}
	if _, err := s.Len(); !errors.Is(err, ErrClosed) {
		t.Errorf("Len after Close: %v", err)
	}
	if _, _, err := s.Expire(); !errors.Is(err, ErrClosed) || !errors.Is(err, inbox.ErrClosed) {
		t.Errorf("Expire after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// Exactly the admissions that succeeded are on disk.
	s = reopen(t, path, Options{})
	rs := mustList(t, s, 0, 0)
	if len(rs) != len(stored) {
		t.Fatalf("%d records after reopen, %d admissions succeeded", len(rs), len(stored))
	}
	for _, r := range rs {
		if id := rec(1, 0); r.Sender != id.Sender {
			t.Fatalf("unexpected record %+v", r)
		}
	}
}

func TestAdmitContext(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Either the request got in before the check (then it commits) or
	// the call reports the cancellation; it never hangs.
	if _, err := s.Admit(ctx, rec(1, 1)); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Admit with cancelled ctx: %v", err)
	}
}

func TestNewerSchema(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE schema_version SET version = ?`, schemaVersion+1); err != nil {
		t.Fatal(err)
	}
	db.Close()

	_, err = Open(path, Options{})
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("Open newer schema: %v", err)
	}
	if want := fmt.Sprintf("version %d,", schemaVersion+1); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name the version (%q)", err, want)
	}
	t.Log(err)
}

// A database keeps its id across reopens; another database has another.
func TestStoreID(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	id := s.ID()
	if len(id) != 32 {
		t.Fatalf("id %q, want 32 hex digits", id)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if again := reopen(t, path, Options{}).ID(); again != id {
		t.Fatalf("id after reopening: %q, was %q", again, id)
	}
	if other, _ := openStore(t, Options{}); other.ID() == id {
		t.Fatalf("two databases share the id %q", id)
	}
}

func TestSchemaVersion(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{})
	var v int
	if err := s.db.QueryRow(`SELECT version FROM schema_version`).Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("schema_version = %d, %v; want %d", v, err, schemaVersion)
	}
	var mode string
	if err := s.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v", mode, err)
	}
	// NORMAL: the store syncs the WAL itself before it answers
	// (walsync_test.go).
	var sync int
	if err := s.db.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil || sync != 1 {
		t.Fatalf("synchronous = %d, %v; want 1 (NORMAL)", sync, err)
	}
}

func TestFileMode(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	mustAdmit(t, s, rec(1, 1)) // makes the WAL exist
	for _, p := range []string{path, path + "-wal"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s has mode %o, want 600", p, m)
		}
	}
}

func TestOddPath(t *testing.T) {
	testutil.CheckGoroutines(t)
	path := t.TempDir() + "/a?b#c%20d.db"
	s := reopen(t, path, Options{})
	mustAdmit(t, s, rec(1, 1))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at the given path: %v", err)
	}
}

// The byte limit refuses admissions past MaxBytes of unacknowledged
// payload, frees room on ack, and is restored from the file on reopen.
func TestByteLimit(t *testing.T) {
	testutil.CheckGoroutines(t)
	big := func(n uint64, size int) Record {
		r := rec(1, n)
		r.Payload = bytes.Repeat([]byte{'x'}, size)
		return r
	}
	s, path := openStore(t, Options{MaxBytes: 100})
	mustAdmit(t, s, big(1, 150)) // one item always fits an empty store
	if _, err := s.Admit(context.Background(), big(2, 1)); !errors.Is(err, ErrFull) {
		t.Fatalf("admit past the byte limit: %v", err)
	}
	if n, err := s.Ack(1); err != nil || n != 1 {
		t.Fatalf("Ack = %d, %v", n, err)
	}
	mustAdmit(t, s, big(3, 60))
	mustAdmit(t, s, big(5, 40)) // exactly 100
	if _, err := s.Admit(context.Background(), big(4, 1)); !errors.Is(err, ErrFull) {
		t.Fatalf("admit to 101 bytes: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, path, Options{MaxBytes: 100})
	if _, err := s.Admit(context.Background(), big(6, 1)); !errors.Is(err, ErrFull) {
		t.Fatalf("after reopen the stored bytes were forgotten: %v", err)
	}
}

func TestCountKinds(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{})
	for i, k := range []string{"message", "request", "response", "message"} {
		r := rec(1, uint64(i+1))
		r.Kind = k
		mustAdmit(t, s, r)
	}
	dup := rec(1, 1) // a duplicate counts nothing
	dup.Kind = "message"
	if d, err := s.Admit(context.Background(), dup); err != nil || !d {
		t.Fatalf("repeat: dup %v, %v", d, err)
	}
	if n, err := s.CountKinds("message", "request"); err != nil || n != 3 {
		t.Fatalf("CountKinds = %d, %v", n, err)
	}
	if n, _ := s.CountKinds("message", "message"); n != 2 {
		t.Fatalf("a kind named twice: %d", n)
	}
	if _, err := s.Ack(1, 1, 99); err != nil { // twice, and unknown: counted once
		t.Fatal(err)
	}
	if n, _ := s.CountKinds("message"); n != 1 {
		t.Fatalf("after ack: %d messages", n)
	}
	if n, _ := s.CountKinds(); n != 0 {
		t.Fatalf("no kinds: %d", n)
	}
	s.Close()
	if _, err := s.CountKinds("message"); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	s = reopen(t, path, Options{}) // counted again from the file
	for kinds, want := range map[string]int{"message": 1, "request": 1, "response": 1, "message,request": 2} {
		if n, err := s.CountKinds(strings.Split(kinds, ",")...); err != nil || n != want {
			t.Errorf("after reopen CountKinds(%s) = %d, %v; want %d", kinds, n, err, want)
		}
	}
	if _, err := s.Ack(2, 3, 4); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.CountKinds("message", "request", "response"); n != 0 {
		t.Fatalf("all acknowledged: %d", n)
	}
}

// Admissions queued from one goroutine commit together, and each reports
// its own outcome.
func TestAdmitAsyncBatches(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, _ := openStore(t, Options{MaxItems: 150})
	before := s.txns.Load()
	var ps []*Pending
	for i := range 200 {
		ps = append(ps, s.AdmitAsync(rec(1, uint64(i%190)+1), queueWait))
	}
	stored, dups, full := 0, 0, 0
	for _, p := range ps {
		switch dup, err := p.Wait(); {
		case errors.Is(err, ErrFull):
			full++
		case err != nil:
			t.Fatal(err)
		case dup:
			dups++
		default:
			stored++
		}
	}
	if stored != 150 || dups != 10 || full != 40 {
		t.Fatalf("stored %d, duplicates %d, full %d; want 150, 10, 40", stored, dups, full)
	}
	if txns := s.txns.Load() - before; txns > 10 {
		t.Fatalf("200 queued admissions took %d transactions", txns)
	}
}

// An admission waits only as long as it was given for room in the commit
// queue; those queued before it still commit.
func TestAdmitAsyncNoRoom(t *testing.T) {
	testutil.CheckGoroutines(t)
	s, path := openStore(t, Options{MaxBatch: 2})
	// Another connection holds the write lock: the committer waits in
	// BEGIN with its batch (one or two, once it took them), and two more
	// fill the queue.
	db, err := sql.Open("sqlite", dsn(path, 0, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	var ps []*Pending
	var late *Pending
	for i := uint64(1); i <= 10 && late == nil; i++ {
		p := s.AdmitAsync(rec(1, i), 100*time.Millisecond)
		if p.Ready() {
			late = p
		} else {
			ps = append(ps, p)
		}
	}
	if late == nil || len(ps) < 2 || len(ps) > 4 {
		t.Fatalf("%d admissions queued before one found no room (%v); want 2 to 4 and then one", len(ps), late != nil)
	}
	if _, err := late.Wait(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with the queue full = %v, want context.DeadlineExceeded", err)
	}
	if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		if dup, err := p.Wait(); dup || err != nil {
			t.Fatalf("admission %d: Wait = %v, %v", i+1, dup, err)
		}
	}
}

// A Pending is Ready once its batch committed and the WAL holding it is
// synced, not before.
func TestPendingReady(t *testing.T) {
	testutil.CheckGoroutines(t)
	// Batches flush only when two requests wait (or after an hour).
	s, _ := openStore(t, Options{FlushInterval: time.Hour, MaxBatch: 2})
	before := s.committed.Load()
	p1 := s.AdmitAsync(rec(1, 1), queueWait)
	if p1.Ready() {
		t.Fatal("Ready before its batch could commit")
	}
	p2 := s.AdmitAsync(rec(1, 2), queueWait)
	testutil.WaitFor(t, 10*time.Second, "the batch to commit", func() bool { return s.committed.Load() > before })
	// Committed, and no one has synced the WAL since.
	if p1.Ready() || p2.Ready() {
		t.Fatal("Ready before the WAL was synced")
	}
	if dup, err := p1.Wait(); dup || err != nil { // syncs
		t.Fatalf("Wait = %v, %v", dup, err)
	}
	if !p2.Ready() {
		t.Fatal("not Ready after a sync that began after its batch committed")
	}
	if dup, err := p2.Wait(); dup || err != nil {
		t.Fatalf("Wait = %v, %v", dup, err)
	}
	s.Close()
	p := s.AdmitAsync(rec(1, 3), queueWait)
	if !p.Ready() {
		t.Fatal("a refused admission is not Ready")
	}
	if _, err := p.Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close = %v", err)
	}
}

// A database written at schema version 1 upgrades in place: its items,
// sequence numbers, acknowledgements and duplicate records survive, and
// the dedup rules hold for rows from before the upgrade.
func TestMigrateFromVersion1(t *testing.T) {
	testutil.CheckGoroutines(t)
	clock := newFakeClock()
	now := clock.Now()
	path := filepath.Join(t.TempDir(), "inbox.db")
	// The pragmas of the builds before incremental vacuum.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	old, recent := now.Add(-2*time.Hour).UnixNano(), now.Add(-time.Minute).UnixNano()
	for _, q := range []string{
		`CREATE TABLE schema_version (version INTEGER NOT NULL)`,
		`INSERT INTO schema_version (version) VALUES (1)`,
		migrations[0],
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	// Keys (sender 1, id n), as rec(1, n) builds them:
	//  1: unacked item, dedup row past the window   -> still a duplicate
	//  2: acked item, dedup row within the window    -> a duplicate
	//  3: acked item, dedup row past the window      -> new again
	//  4: no item (expired from history), recent row -> a duplicate
	//  5: acked item (seq 4), then, after the window passed, admitted
	//     again (seq 5) and not yet acked                -> a duplicate
	items := []struct {
		n     uint64
		acked bool
	}{{1, false}, {2, true}, {3, true}, {5, true}, {5, false}}
	for _, it := range items {
		r := rec(1, it.n)
		var acked any
		if it.acked {
			acked = recent
		}
		if _, err := db.Exec(`INSERT INTO items (sender, id, kind, peer, received, payload, acked_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			r.Sender[:], r.ID[:], r.Kind, r.Peer, old, r.Payload, acked); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []struct {
		n    uint64
		seen int64
	}{{1, old}, {2, recent}, {3, old}, {4, recent}, {5, old}} {
		r := rec(1, d.n)
		if _, err := db.Exec(`INSERT INTO dedup (sender, id, first_seen) VALUES (?, ?, ?)`, r.Sender[:], r.ID[:], d.seen); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := reopen(t, path, Options{Now: clock.Now, DedupWindow: time.Hour})
	var v int
	if err := s.db.QueryRow(`SELECT version FROM schema_version`).Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("schema_version = %d, %v; want %d", v, err, schemaVersion)
	}
	if len(s.ID()) != 32 {
		t.Fatalf("database id after the upgrade: %q", s.ID())
	}
	var av int
	if err := s.db.QueryRow(`PRAGMA auto_vacuum`).Scan(&av); err != nil || av != autoVacuumIncremental {
		t.Fatalf("auto_vacuum after the upgrade = %d, %v; want %d (incremental)", av, err, autoVacuumIncremental)
	}
	var idx int
	if err := s.db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'items_key'`).Scan(&idx); err != nil || idx != 0 {
		t.Fatalf("items_key indexes: %d, %v; want it dropped", idx, err)
	}
	got := mustList(t, s, 0, 0)
	if fmt.Sprint(seqsOf(got)) != "[1 5]" || mustLen(t, s) != 2 {
		t.Fatalf("unacked after upgrade: %v (Len %d); want seqs [1 5]", seqsOf(got), mustLen(t, s))
	}
	for i, n := range []uint64{1, 5} {
		if want := rec(1, n); got[i].ID != want.ID || !bytes.Equal(got[i].Payload, want.Payload) || !got[i].Received.Equal(time.Unix(0, old)) {
			t.Fatalf("item %d changed in the upgrade: %+v", got[i].Seq, got[i])
		}
	}
	mustDup(t, s, rec(1, 1))
	mustDup(t, s, rec(1, 2))
	mustDup(t, s, rec(1, 4))
	mustDup(t, s, rec(1, 5))
	mustAdmit(t, s, rec(1, 3))
	if got := fmt.Sprint(seqsOf(mustList(t, s, 0, 0))); got != "[1 5 6]" {
		t.Fatalf("unacked after admitting key 3 again: %s; want a new seq after the old ones", got)
	}
	// Expire keeps the rows of unacked items (1, 5 and the new 3), drops
	// only what is past the window: none of 2 and 4 yet.
	if d, _, err := s.Expire(); err != nil || d != 0 {
		t.Fatalf("Expire = %d, %v; want 0 dedup rows", d, err)
	}
	if _, err := s.Ack(1, 5); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	if d, _, err := s.Expire(); err != nil || d != 4 {
		t.Fatalf("Expire after acks = %d, %v; want 4 (keys 1, 2, 4, 5; 3's item is unacked)", d, err)
	}
	mustDup(t, s, rec(1, 3))
	mustAdmit(t, s, rec(1, 1))
}

// By default the committer does not wait for more requests: a lone
// admission commits on its own (even with a batch limit that would never
// fill), and what is queued meanwhile commits together.
func TestNoFlushWaitByDefault(t *testing.T) {
	testutil.CheckGoroutines(t)
	if got := (Options{}).withDefaults().FlushInterval; got != 0 {
		t.Fatalf("default FlushInterval %v, want 0 (no wait)", got)
	}
	s, _ := openStore(t, Options{MaxBatch: 1000})
	mustAdmit(t, s, rec(1, 1))
	if n := s.txns.Load(); n != 1 {
		t.Fatalf("%d transactions for one admission", n)
	}
}

// Processes opening one new database at the same instant (two meerkatd
// starting, or a command reading the inbox while the daemon starts) all
// succeed: the connections that lose the race to set it up wait for it.
func TestOpenConcurrently(t *testing.T) {
	testutil.CheckGoroutines(t)
	for range 15 {
		path := filepath.Join(t.TempDir(), "inbox.db")
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := Open(path, Options{})
				if err != nil {
					t.Errorf("open: %v", err)
					return
				}
				s.Close()
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}

// ListBytes and ListClassBytes stop once the payloads read reach
// maxBytes, with at least one record, and say cut when they stopped so
// before the limit (records may follow).
func TestListBytes(t *testing.T) {
	s, _ := openStore(t, Options{})
	ctx := context.Background()
	for i := range uint64(6) {
		r := rec(1, i+1)
		r.Payload = make([]byte, 100) // 100 bytes each
		if _, err := s.Admit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		after           uint64
		limit, maxBytes int
		want            []uint64
		cut             bool
	}{
		{0, 0, 0, []uint64{1, 2, 3, 4, 5, 6}, false},
		{0, 0, 250, []uint64{1, 2, 3}, true},
		{0, 0, 300, []uint64{1, 2, 3}, true},
		{0, 0, 301, []uint64{1, 2, 3, 4}, true},
		{0, 0, 1, []uint64{1}, true},
		{0, 3, 300, []uint64{1, 2, 3}, false}, // the limit, not the bytes
		{0, 2, 1000, []uint64{1, 2}, false},
		// The end reached with the bytes: cut, as the next row is not
		// read to know; the next read finds nothing.
		{4, 0, 150, []uint64{5, 6}, true},
		{5, 0, 50, []uint64{6}, true},
		{6, 0, 50, nil, false},
		{4, 0, 201, []uint64{5, 6}, false},
		{2, 10, 0, []uint64{3, 4, 5, 6}, false},
	}
	for _, tt := range tests {
		for _, class := range []string{"", DefaultClass} {
			var (
				got []Record
				cut bool
				err error
			)
			if class == "" {
				got, cut, err = s.ListBytes(tt.after, tt.limit, tt.maxBytes)
			} else {
				got, cut, err = s.ListClassBytes(class, tt.after, tt.limit, tt.maxBytes)
			}
			if err != nil || !slices.Equal(seqsOf(got), tt.want) || cut != tt.cut {
				t.Errorf("class %q after %d limit %d max %d: %v cut %v, %v; want %v cut %v", class, tt.after, tt.limit, tt.maxBytes, seqsOf(got), cut, err, tt.want, tt.cut)
			}
		}
	}
}
