package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestPushDrainOrder(t *testing.T) {
	q := New[int](0)
	if q.Max() != DefaultMax {
		t.Fatalf("Max = %d, want default %d", q.Max(), DefaultMax)
	}
	if got := q.Drain(); got != nil {
		t.Fatalf("empty Drain = %v", got)
	}
	for i := range 5 {
		if err := q.Push(i); err != nil {
			t.Fatal(err)
		}
	}
	if q.Len() != 5 {
		t.Fatalf("Len = %d", q.Len())
	}
	got := q.Drain()
	if fmt.Sprint(got) != "[0 1 2 3 4]" {
		t.Fatalf("Drain = %v", got)
	}
	if q.Len() != 0 || q.HighWater() != 5 {
		t.Fatalf("after drain Len %d HighWater %d", q.Len(), q.HighWater())
	}
}

func TestFullRefuses(t *testing.T) {
	q := New[string](2)
	for _, s := range []string{"a", "b"} {
		if err := q.Push(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Push("c"); !errors.Is(err, ErrFull) {
		t.Fatalf("push to full queue: %v", err)
	}
	if got := q.Drain(); fmt.Sprint(got) != "[a b]" {
		t.Fatalf("full queue lost or gained items: %v", got)
	}
	if err := q.Push("c"); err != nil {
		t.Fatalf("push after drain: %v", err)
	}
}

func TestCloseKeepsItemsAndWakes(t *testing.T) {
	q := New[int](4)
	q.Push(1)
	q.Close()
	q.Close() // idempotent
	if err := q.Push(2); !errors.Is(err, ErrClosed) {
		t.Fatalf("push after close: %v", err)
	}
	items, err := q.Wait(context.Background())
	if err != nil || fmt.Sprint(items) != "[1]" {
		t.Fatalf("Wait after close = %v, %v; want the queued item", items, err)
	}
	if _, err := q.Wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait on closed empty queue: %v", err)
	}
	select {
	case <-q.Ready():
	default:
		t.Fatal("Ready not signalled after close")
	}
}

func TestWaitHonoursContext(t *testing.T) {
	q := New[int](4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := q.Wait(ctx)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel: %v", err)
	}
}

func TestWaitWakesOnPush(t *testing.T) {
	q := New[int](4)
	got := make(chan []int)
	go func() {
		items, _ := q.Wait(context.Background())
		got <- items
	}()
	q.Push(7)
	select {
	case items := <-got:
		if fmt.Sprint(items) != "[7]" {
			t.Fatalf("woke with %v", items)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not wake on push")
	}
}

// Many producers and consumers: every item is delivered exactly once, and
// each producer's items come out in its order.
func TestConcurrentFIFOPerProducer(t *testing.T) {
	const producers, each = 4, 2000
	type item struct{ p, n int }
	q := New[item](producers * each)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range each {
				if err := q.Push(item{p, n}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	next := make([]int, producers)
	received := 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for received < producers*each {
		items, err := q.Wait(ctx)
		if err != nil {
			t.Fatalf("after %d items: %v", received, err)
		}
		for _, it := range items {
			if it.n != next[it.p] {
				t.Fatalf("producer %d: got item %d, want %d", it.p, it.n, next[it.p])
			}
			next[it.p]++
			received++
		}
	}
	wg.Wait()
	if extra := q.Drain(); len(extra) != 0 {
		t.Fatalf("%d items delivered twice or invented", len(extra))
	}
}

func Example() {
	q := New[string](100)
	q.Push("first")
	q.Push("second")
	// An agent loop drains everything queued at a turn boundary.
	items, _ := q.Wait(context.Background())
	for _, it := range items {
		fmt.Println(it)
	}
	fmt.Println(q.Len())
	// Output:
	// first
	// second
	// 0
}
