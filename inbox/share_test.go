package inbox

import (
	"errors"
	"math"
	"testing"
)

type sent struct {
	from string
	size int
}

// TestMailboxShare: a sender flooding the mailbox stops at its share once
// it is over half full, while another sender is still admitted; acking
// gives the flooder room again.
func TestMailboxShare(t *testing.T) {
	m := NewMailbox[sent](100)
	m.SetShare(DefaultShare, func(s sent) string { return s.from })
	stored := 0
	for i := 0; i < 100; i++ {
		err := m.Push(sent{from: "a"})
		if err == nil {
			stored++
			continue
		}
		if !errors.Is(err, ErrShare) || !errors.Is(err, ErrFull) {
			t.Fatalf("push %d: %v, want ErrShare (an ErrFull)", i, err)
		}
	}
	if stored != 50 {
		t.Fatalf("flooder stored %d, want 50 (half of 100, alone)", stored)
	}
	for i := 0; i < 25; i++ {
		if err := m.Push(sent{from: "b"}); err != nil {
			t.Fatalf("second sender's push %d: %v", i, err)
		}
	}
	if err := m.Push(sent{from: "b"}); !errors.Is(err, ErrShare) {
		t.Fatalf("second sender past 50/2: %v, want ErrShare", err)
	}
	if err := m.Push(sent{from: ""}); err != nil {
		t.Fatalf("local item: %v", err)
	}
	if err := m.Push(sent{from: "c"}); err != nil {
		t.Fatalf("third sender's first push: %v", err)
	}
	// Ack the flooder's items: it may store again.
	var seqs []uint64
	for _, e := range m.List(0, 0) {
		if e.Item.from == "a" {
			seqs = append(seqs, e.Seq)
		}
	}
	m.Ack(seqs...)
	if err := m.Push(sent{from: "a"}); err != nil {
		t.Fatalf("flooder after its items were acked: %v", err)
	}
	m.AckUpTo(1 << 62)
	if m.shares.Senders() != 0 {
		t.Fatalf("shares after acking everything: %v", m.shares.by)
	}
}

// TestMailboxShareBytes: the byte share binds too.
func TestMailboxShareBytes(t *testing.T) {
	m := NewMailbox[sent](1000)
	m.SetByteLimit(1000, func(s sent) int { return s.size })
	m.SetShare(DefaultShare, func(s sent) string { return s.from })
	n := 0
	for m.Push(sent{"a", 100}) == nil {
		n++
	}
	if n != 5 {
		t.Fatalf("flooder stored %d items of 100 bytes, want 5 (500 of 1000 bytes)", n)
	}
	if err := m.Push(sent{"b", 100}); err != nil {
		t.Fatalf("other sender: %v", err)
	}
}

func TestFairShare(t *testing.T) {
	lim := Usage{100, 0}
	if !FairShare(50, Usage{60, 0}, Usage{10, 0}, lim, 0, 1) {
		t.Fatal("under half full must admit") // (held > total cannot happen; the rule only looks at total)
	}
	if FairShare(50, Usage{50, 0}, Usage{60, 0}, lim, 0, 2) {
		t.Fatal("over its share (25) must refuse")
	}
	if !FairShare(50, Usage{0, 0}, Usage{99, 0}, lim, 0, 5) {
		t.Fatal("a sender holding nothing is admitted")
	}
	if !FairShare(100, Usage{99, 0}, Usage{99, 0}, lim, 0, 1) {
		t.Fatal("100% lets a lone sender fill the inbox")
	}
	// A byte limit written as "unlimited" (the largest int64) is no
	// smaller a share: the arithmetic does not overflow.
	huge := Usage{10000, math.MaxInt64}
	if !FairShare(50, Usage{1, 100}, Usage{6000, 1000}, huge, 10, 2) {
		t.Fatal("with the largest byte limit, a second sender's second item was refused")
	}
	if FairShare(50, Usage{2500, 100}, Usage{6000, 1000}, huge, 10, 2) {
		t.Fatal("with the largest byte limit, a sender past its item share was admitted")
	}
	for _, c := range []struct {
		v    int64
		p    int
		want int64
	}{{100, 50, 50}, {99, 50, 49}, {7, 100, 7}, {1, 1, 0}, {math.MaxInt64, 50, math.MaxInt64 / 2}, {math.MaxInt64, 100, math.MaxInt64}} {
		if got := percentOf(c.v, c.p); got != c.want {
			t.Errorf("percentOf(%d, %d) = %d, want %d", c.v, c.p, got, c.want)
		}
	}
}
