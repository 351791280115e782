package inbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func seqs[T any](es []Entry[T]) string {
	var s []uint64
	for _, e := range es {
		s = append(s, e.Seq)
	}
	return fmt.Sprint(s)
}

func TestMailboxListAckCursor(t *testing.T) {
	m := NewMailbox[string](3)
	for _, s := range []string{"a", "b", "c"} {
		if err := m.Push(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Push("d"); !errors.Is(err, ErrFull) {
		t.Fatalf("push to full mailbox: %v", err)
	}
	if got := seqs(m.List(0, 0)); got != "[1 2 3]" {
		t.Fatalf("List = %s", got)
	}
	if got := seqs(m.List(1, 1)); got != "[2]" {
		t.Fatalf("List(after 1, limit 1) = %s", got)
	}
	if got := m.List(0, 0); got[0].Item != "a" || got[2].Item != "c" {
		t.Fatalf("items out of order: %v", got)
	}
	if n := m.Ack(2, 2, 99); n != 1 {
		t.Fatalf("Ack removed %d", n)
	}
	if got := seqs(m.List(0, 0)); got != "[1 3]" {
		t.Fatalf("after ack: %s", got)
	}
	if err := m.Push("d"); err != nil {
		t.Fatalf("push after ack made room: %v", err)
	}
	if n := m.AckUpTo(3); n != 2 {
		t.Fatalf("AckUpTo removed %d", n)
	}
	if got := seqs(m.List(0, 0)); got != "[4]" || m.Len() != 1 {
		t.Fatalf("after AckUpTo: %s (len %d)", got, m.Len())
	}
}

func TestMailboxWait(t *testing.T) {
	m := NewMailbox[int](0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if got, err := m.Wait(ctx, 0, 0); !errors.Is(err, context.DeadlineExceeded) || len(got) != 0 {
		t.Fatalf("Wait on empty: %v, %v", got, err)
	}
	done := make(chan []Entry[int])
	go func() {
		got, _ := m.Wait(context.Background(), 0, 0)
		done <- got
	}()
	m.Push(5)
	select {
	case got := <-done:
		if len(got) != 1 || got[0].Item != 5 {
			t.Fatalf("woke with %v", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not wake")
	}
	// A waiter for items after the cursor ignores older ones.
	go func() {
		got, _ := m.Wait(context.Background(), 1, 0)
		done <- got
	}()
	m.Push(6)
	if got := <-done; len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("cursor wait got %v", got)
	}
	m.Close()
	m.Close()
	if err := m.Push(7); !errors.Is(err, ErrClosed) {
		t.Fatalf("push after close: %v", err)
	}
	if got, err := m.Wait(context.Background(), 2, 0); err != nil || len(got) != 0 {
		t.Fatalf("Wait after close: %v, %v", got, err)
	}
}

func TestMailboxByteLimit(t *testing.T) {
	m := NewMailbox[string](100)
	m.SetByteLimit(10, func(s string) int { return len(s) })
	if err := m.Push("0123456789ABC"); err != nil {
		t.Fatalf("one oversized item into an empty mailbox: %v", err)
	}
	if err := m.Push("x"); !errors.Is(err, ErrFull) {
		t.Fatalf("push over the byte limit: %v", err)
	}
	m.AckUpTo(1)
	for _, s := range []string{"12345", "12345"} {
		if err := m.Push(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Push("1"); !errors.Is(err, ErrFull) {
		t.Fatalf("push past 10 bytes: %v", err)
	}
	m.Ack(2)
	if err := m.Push("1234"); err != nil {
		t.Fatalf("push after an ack freed bytes: %v", err)
	}
}

// TestMailboxChanged: the channel from Changed closes at the next push,
// ack or close, and only then; one asked for after a change waits for the
// one after it.
func TestMailboxChanged(t *testing.T) {
	isClosed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	m := NewMailbox[string](10)
	for _, step := range []struct {
		name   string
		change func()
		closes bool
	}{
		{"push", func() { m.Push("a") }, true},
		{"ack of nothing", func() { m.Ack(99) }, false},
		{"ack", func() { m.Ack(1) }, true},
		{"push refused after close", func() { m.Close(); m.Push("b") }, true},
		{"close again", func() { m.Close() }, false},
	} {
		c := m.Changed()
		if isClosed(c) {
			t.Fatalf("%s: Changed is closed before the change", step.name)
		}
		if again := m.Changed(); again != c {
			t.Fatalf("%s: two calls with no change between gave different channels", step.name)
		}
		step.change()
		if got := isClosed(c); got != step.closes {
			t.Fatalf("%s: closed = %v, want %v", step.name, got, step.closes)
		}
	}
}
