package store

import (
	"context"
	"errors"
	"testing"

	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// TestPeerShare: a sender flooding the store stops at its share once the
// store is over half full, while other senders (and local items) are
// still admitted; the counts survive a reopen and acks give room back.
func TestPeerShare(t *testing.T) {
	testutil.CheckGoroutines(t)
	opts := Options{MaxItems: 20, PeerShare: inbox.DefaultShare}
	s, path := openStore(t, opts)
	ctx := context.Background()
	n := uint64(0)
	for ; n < 20; n++ {
		if _, err := s.Admit(ctx, rec(1, n)); err != nil {
			if !errors.Is(err, ErrShare) || !errors.Is(err, inbox.ErrShare) || errors.Is(err, ErrFull) {
				t.Fatalf("Admit %d: %v, want ErrShare (not ErrFull)", n, err)
			}
			break
		}
	}
	if n != 10 {
		t.Fatalf("flooder stored %d, want 10 (half of 20, alone)", n)
	}
	for i := uint64(0); i < 5; i++ {
		mustAdmit(t, s, rec(2, i))
	}
	if _, err := s.Admit(ctx, rec(2, 5)); !errors.Is(err, ErrShare) {
		t.Fatalf("second sender past its share (20/2/2): %v", err)
	}
	mustAdmit(t, s, rec(0, 1)) // local: no share
	mustDup(t, s, rec(1, 0))   // a duplicate is still one
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, path, opts)
	if _, err := s.Admit(ctx, rec(1, 99)); !errors.Is(err, ErrShare) {
		t.Fatalf("flooder after reopen: %v, want ErrShare (counts rebuilt)", err)
	}
	mustAdmit(t, s, rec(3, 1))
	var seqs []uint64
	for _, r := range mustList(t, s, 0, 0) {
		if r.Sender[0] == 1 {
			seqs = append(seqs, r.Seq)
		}
	}
	if k, err := s.Ack(seqs...); err != nil || k != 10 {
		t.Fatalf("Ack = %d, %v", k, err)
	}
	mustAdmit(t, s, rec(1, 99))
}
