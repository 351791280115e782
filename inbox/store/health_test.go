package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/comms/outbox"
	"github.com/meerkatd/meerkatd/identity"
)

// Writable is nil while the store is open and takes writes, and says the
// store is closed once it is.
func TestWritable(t *testing.T) {
	s, _ := openStore(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("open store: %v", err)
	}
	if _, err := s.Admit(ctx, rec(1, 1)); err != nil {
		t.Fatalf("a write after the probe: %v", err)
	}
	s.Close()
	if err := s.Writable(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed store: %v", err)
	}
}

// A full disk lets a transaction begin and fails its commit: Writable
// reports the failed write (until a later one commits). A page limit
// stands in for the disk.
func TestWritableAfterFailedWrite(t *testing.T) {
	s, _ := openStore(t, Options{pragmas: "&_pragma=max_page_count(64)"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for n := uint64(1); n <= 1000 && err == nil; n++ {
		_, err = s.Admit(ctx, bigRec(1, n, 8<<10))
	}
	if err == nil || errors.Is(err, ErrFull) {
		t.Fatalf("admitting past the page limit: %v, want a failed write", err)
	}
	if werr := s.Writable(ctx); werr == nil || !strings.Contains(werr.Error(), "full") {
		t.Fatalf("Writable after a failed write: %v, want the failure", werr)
	}
	// Reads still work: the node stays up, not ready.
	if _, err := s.Len(); err != nil {
		t.Fatalf("a read after the failed write: %v", err)
	}
}

// Bytes follows the payloads of the unacknowledged items.
func TestBytesFollowsInbox(t *testing.T) {
	s, path := openStore(t, Options{})
	ctx := context.Background()
	a, b := rec(1, 1), rec(1, 2)
	b.Payload = append(b.Payload, make([]byte, 100)...)
	for _, r := range []Record{a, b} {
		if _, err := s.Admit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Bytes(); err != nil || n != int64(len(a.Payload)+len(b.Payload)) {
		t.Fatalf("bytes %d, %v; want %d", n, err, len(a.Payload)+len(b.Payload))
	}
	recs, _ := s.List(0, 0)
	if _, err := s.Ack(recs[1].Seq); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Bytes(); n != int64(len(a.Payload)) {
		t.Fatalf("bytes after acking the larger item: %d, want %d", n, len(a.Payload))
	}
	s.Close()
	if n, _ := reopen(t, path, Options{}).Bytes(); n != int64(len(a.Payload)) {
		t.Fatalf("bytes after reopening: %d, want %d", n, len(a.Payload))
	}
}

func TestDeadLetterCount(t *testing.T) {
	s, _ := openStore(t, Options{})
	ob := s.Outbox()
	if n, err := ob.DeadLetterCount(); err != nil || n != 0 {
		t.Fatalf("empty: %d, %v", n, err)
	}
	var to identity.PeerID
	to[0] = 7
	for range 3 {
		e, err := ob.Add(outbox.Entry{ID: identity.NewUUID(), To: to, Peer: "bob", Kind: "message", Payload: []byte("x"), Created: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Kill(e.ID, "expired", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := ob.DeadLetterCount(); err != nil || n != 3 {
		t.Fatalf("count %d, %v; want 3", n, err)
	}
}
