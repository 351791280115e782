package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
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
	if n := m.Bytes(); n != 13 {
		t.Fatalf("bytes %d, want 13", n)
	}
	m.AckUpTo(1)
	if n := m.Bytes(); n != 0 {
		t.Fatalf("bytes after the ack: %d, want 0", n)
	}
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

// runMailboxOps applies the operations that ops encodes to a Mailbox and
// to a plain slice that models it, and fails at the first difference in
// what they return, hold or signal (Changed), or when the chunks lose
// their shape (an empty chunk, two neighbours that would fit in one) or
// keep removed entries reachable. Pushes outnumber acks, so the mailbox spans
// many chunks; byte and count limits are both in play.
func runMailboxOps(t *testing.T, ops []byte) {
	const maxItems = 300
	type entry struct {
		seq  uint64
		item string
	}
	m := NewMailbox[string](maxItems)
	m.SetByteLimit(4000, func(s string) int { return len(s) })
	var model []entry
	next, stored := uint64(1), 0
	byteAt := func(i int) byte {
		if i < len(ops) {
			return ops[i]
		}
		return 0
	}
	for i := 0; i < len(ops); i += 3 {
		op, a, b := ops[i]%8, byteAt(i+1), byteAt(i+2)
		changed, before := m.Changed(), len(model)
		pushed := false
		switch op {
		case 0, 1, 2, 3: // push an item of a bytes
			item := strings.Repeat("x", int(a)%40)
			err := m.Push(item)
			full := len(model) >= maxItems || (len(model) > 0 && stored+len(item) > 4000)
			if full != errors.Is(err, ErrFull) || (!full && err != nil) {
				t.Fatalf("op %d: push with %d stored (%d bytes): %v", i/3, len(model), stored, err)
			}
			if err == nil {
				model = append(model, entry{next, item})
				stored += len(item)
				next++
				pushed = true
			}
		case 4: // ack two sequences anywhere (some long gone, some not yet used)
			var s1, s2 uint64
			if len(model) > 0 {
				s1, s2 = model[0].seq+uint64(a)%(maxItems+5), model[0].seq+uint64(b)%(maxItems+5)-3
			}
			want := 0
			kept := model[:0:0]
			for _, e := range model {
				if e.seq == s1 || e.seq == s2 {
					want++
					stored -= len(e.item)
				} else {
					kept = append(kept, e)
				}
			}
			model = kept
			if got := m.Ack(s1, s2, s1); got != want {
				t.Fatalf("op %d: Ack(%d, %d) removed %d, want %d", i/3, s1, s2, got, want)
			}
		case 5: // ack up to a sequence: all, any number, or a few of the oldest
			upTo := next - 1
			switch {
			case len(model) == 0 || a == 0:
			case a < 32:
				upTo = model[0].seq - 1 + uint64(b)%uint64(len(model)+1)
			default:
				upTo = model[0].seq + uint64(a)%8 - 2
			}
			want := 0
			for want < len(model) && model[want].seq <= upTo {
				stored -= len(model[want].item)
				want++
			}
			model = model[want:]
			if got := m.AckUpTo(upTo); got != want {
				t.Fatalf("op %d: AckUpTo(%d) removed %d, want %d", i/3, upTo, got, want)
			}
		default: // list after a cursor, with a limit
			after, limit := uint64(0), int(b)%80
			if len(model) > 0 { // from just before the oldest to past the newest
				after = uint64(max(0, int64(model[0].seq)+int64(a)-10))
			}
			var want []entry
			for _, e := range model {
				if e.seq > after && (limit == 0 || len(want) < limit) {
					want = append(want, e)
				}
			}
			got := m.List(after, limit)
			if len(got) != len(want) || cap(got) != len(got) {
				t.Fatalf("op %d: List(%d, %d) gave %d entries (capacity %d), want %d", i/3, after, limit, len(got), cap(got), len(want))
			}
			for j := range got {
				if got[j].Seq != want[j].seq || got[j].Item != want[j].item {
					t.Fatalf("op %d: List(%d, %d)[%d] = %d %q, want %d %q", i/3, after, limit, j, got[j].Seq, got[j].Item, want[j].seq, want[j].item)
				}
			}
		}
		if m.Len() != len(model) || m.bytes != stored {
			t.Fatalf("op %d: Len = %d, %d bytes, want %d, %d", i/3, m.Len(), m.bytes, len(model), stored)
		}
		select {
		case <-changed:
			if !pushed && len(model) == before {
				t.Fatalf("op %d: Changed fired with nothing pushed or removed", i/3)
			}
		default:
			if pushed || len(model) != before {
				t.Fatalf("op %d: Changed did not fire (pushed %v, %d entries before, %d after)", i/3, pushed, before, len(model))
			}
		}
		if err := mailboxShape(m); err != nil {
			t.Fatalf("op %d: %v", i/3, err)
		}
	}
	if got := m.List(0, 0); len(got) != len(model) {
		t.Fatalf("at the end: %d entries listed, want %d", len(got), len(model))
	}
}

// TestMailboxModel runs a long pseudo-random sequence of pushes, acks and
// lists (the same sequence every run) against the model.
func TestMailboxModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ops := make([]byte, 90000)
	for i := range ops {
		ops[i] = byte(rng.Uint32())
	}
	runMailboxOps(t, ops)
}

func FuzzMailbox(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0, 5, 0}, 200))                  // pushes across chunks
	f.Add(append(bytes.Repeat([]byte{1, 9, 0}, 150), 5, 0, 0)) // then ack all
	f.Add(append(bytes.Repeat([]byte{2, 1, 0}, 140), 4, 64, 63, 4, 0, 1, 7, 3, 2))
	f.Fuzz(runMailboxOps)
}

// mailboxShape checks the invariants of m's chunks: none empty, each of
// capacity chunkLen, no two neighbours that would fit in one, and no
// removed entry or dropped chunk still reachable past a slice's end.
func mailboxShape[T comparable](m *Mailbox[T]) error {
	for c, ch := range m.chunks {
		if len(ch) == 0 || cap(ch) != chunkLen {
			return fmt.Errorf("chunk %d has %d entries, capacity %d", c, len(ch), cap(ch))
		}
		if c > 0 && len(m.chunks[c-1])+len(ch) <= chunkLen {
			return fmt.Errorf("chunks %d and %d hold %d and %d entries: they fit in one", c-1, c, len(m.chunks[c-1]), len(ch))
		}
		for _, e := range ch[len(ch):cap(ch)] {
			if e != (Entry[T]{}) {
				return fmt.Errorf("chunk %d keeps a removed entry (%d) past its end", c, e.Seq)
			}
		}
	}
	for _, ch := range m.chunks[len(m.chunks):cap(m.chunks)] {
		if ch != nil {
			return errors.New("a dropped chunk is still referenced")
		}
	}
	return nil
}

// TestMailboxAckScattered acknowledges every entry one at a time, in
// orders that empty chunks anywhere (the newest entry alone in its chunk
// first) and make neighbours merge both ways; after every ack the shape
// holds and the entries left are exactly those not acknowledged.
func TestMailboxAckScattered(t *testing.T) {
	const n = 5*chunkLen + 1 // the last chunk holds one entry
	orders := map[string]func() []uint64{
		"newest first": func() []uint64 {
			var o []uint64
			for s := uint64(n); s >= 1; s-- {
				o = append(o, s)
			}
			return o
		},
		"odd then even": func() []uint64 {
			var o []uint64
			for s := uint64(1); s <= n; s += 2 {
				o = append(o, s)
			}
			for s := uint64(2); s <= n; s += 2 {
				o = append(o, s)
			}
			return o
		},
		"middle outwards": func() []uint64 {
			var o []uint64
			for d := 0; len(o) < n; d++ {
				for _, s := range []int{n/2 - d, n/2 + 1 + d} {
					if s >= 1 && s <= n {
						o = append(o, uint64(s))
					}
				}
			}
			return o
		},
		"stride 7": func() []uint64 {
			var o []uint64
			for start := uint64(1); start <= 7; start++ {
				for s := start; s <= n; s += 7 {
					o = append(o, s)
				}
			}
			return o
		},
	}
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			m := NewMailbox[int](0)
			left := make([]bool, n+1)
			for s := 1; s <= n; s++ {
				if err := m.Push(s); err != nil {
					t.Fatal(err)
				}
				left[s] = true
			}
			for k, s := range order() {
				if got := m.Ack(s); got != 1 {
					t.Fatalf("ack %d (%d): removed %d", k, s, got)
				}
				left[s] = false
				if err := mailboxShape(m); err != nil {
					t.Fatalf("after ack %d (%d): %v", k, s, err)
				}
				var want []uint64
				for s := 1; s <= n; s++ {
					if left[s] {
						want = append(want, uint64(s))
					}
				}
				if got, want := seqs(m.List(0, 0)), fmt.Sprint(want); got != want {
					t.Fatalf("after ack %d (%d): left %s, want %s", k, s, got, want)
				}
			}
			if m.Len() != 0 || len(m.chunks) != 0 {
				t.Fatalf("everything acknowledged, %d entries and %d chunks left", m.Len(), len(m.chunks))
			}
		})
	}
}
