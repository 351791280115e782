package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// openStore opens a store in a fresh temp dir and closes it at cleanup.
func openStore(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "inbox.db")
	return reopen(t, path, opts), path
}

// reopen opens the store at path and closes it at cleanup.
func reopen(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rec returns a record whose key is derived from sender and n.
func rec(sender byte, n uint64) Record {
	r := Record{Kind: "message", Peer: "alice"}
	r.Sender[0] = sender
	binary.BigEndian.PutUint64(r.ID[:], n)
	r.Payload = binary.BigEndian.AppendUint64([]byte("p"), n)
	return r
}

func seqsOf(rs []Record) []uint64 {
	var out []uint64
	for _, r := range rs {
		out = append(out, r.Seq)
	}
	return out
}

// withRawRow creates a store, writes one row with SQL statement insert
// behind its back (check constraints off, as a corrupt file could hold
// anything), and returns the store reopened.
func withRawRow(t *testing.T, insert string) *Store {
	t.Helper()
	s, path := openStore(t, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), `PRAGMA ignore_check_constraints = ON`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), insert); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	db.Close()
	return reopen(t, path, Options{})
}

// queueWait is how long the tests' asynchronous admissions wait for room
// in the commit queue: long enough never to decide a test.
const queueWait = time.Minute
