package inbox

import "testing"

// BenchmarkMailboxListNewest pages the ten newest entries of a full
// default-sized mailbox, as a client polling with its cursor does.
func BenchmarkMailboxListNewest(b *testing.B) {
	m := NewMailbox[[256]byte](DefaultMax)
	for range DefaultMax {
		if err := m.Push([256]byte{}); err != nil {
			b.Fatal(err)
		}
	}
	after := uint64(DefaultMax - 10)
	for b.Loop() {
		if got := m.List(after, 10); len(got) != 10 {
			b.Fatalf("listed %d entries", len(got))
		}
	}
}

// BenchmarkMailboxAckOldest acknowledges the oldest entry of a full
// mailbox and pushes one in its place, as a client draining in order does.
func BenchmarkMailboxAckOldest(b *testing.B) {
	m := NewMailbox[[256]byte](DefaultMax)
	for range DefaultMax {
		if err := m.Push([256]byte{}); err != nil {
			b.Fatal(err)
		}
	}
	oldest := uint64(1)
	for b.Loop() {
		if m.Ack(oldest) != 1 {
			b.Fatal("ack removed nothing")
		}
		oldest++
		if err := m.Push([256]byte{}); err != nil {
			b.Fatal(err)
		}
	}
}
