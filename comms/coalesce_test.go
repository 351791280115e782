package comms

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/internal/testutil"
)

// writeRecorder is a connection that keeps each Write's bytes.
type writeRecorder struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
	fail   bool // every write fails
	closed bool
}

func (w *writeRecorder) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail {
		return 0, errors.New("test: reset")
	}
	w.writes = append(w.writes, bytes.Clone(b))
	return len(b), nil
}

func (w *writeRecorder) SetWriteDeadline(time.Time) error { return nil }
func (w *writeRecorder) SetReadDeadline(time.Time) error  { return nil }

func (w *writeRecorder) Close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	return nil
}

func (w *writeRecorder) got() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

// coalescerConn is an outConn on a recorder, on a link of a Router that
// sends no acks hint (so frames are written as they are given).
func coalescerConn(t *testing.T) (*link, *outConn, *writeRecorder) {
	t.Helper()
	r := &Router{opts: Options{AckTimeout: time.Second, SingleAcks: true, MaxMessageBytes: 1 << 16}, log: slog.New(slog.DiscardHandler)}
	l := &link{r: r}
	w := &writeRecorder{}
	oc := newOutConn(l, w)
	l.conn = oc
	return l, oc, w
}

func testFrame(i int) []byte { return fmt.Appendf(nil, "frame %03d;", i) }

func TestCoalescerHoldsWhileOthersSeal(t *testing.T) {
	l, oc, w := coalescerConn(t)
	co := &l.co

	// Nobody sealing: the frame is the caller's to write at once.
	if held, out := co.hold(heldFrame{oc: oc, b: testFrame(0)}); held || len(out) != 0 {
		t.Fatalf("lone send: held %v, out %d; want written at once", held, len(out))
	}

	co.beginSeal() // another send is sealing
	for i := 1; i <= 3; i++ {
		if held, _ := co.hold(heldFrame{oc: oc, b: testFrame(i)}); !held {
			t.Fatalf("frame %d not held while another send seals", i)
		}
	}
	if n := len(w.got()); n != 0 {
		t.Fatalf("%d writes while held", n)
	}
	co.endSeal() // the last sealer writes them, in one write
	got := w.got()
	want := bytes.Join([][]byte{testFrame(1), testFrame(2), testFrame(3)}, nil)
	if len(got) != 1 || !bytes.Equal(got[0], want) {
		t.Fatalf("writes %q, want one write %q", got, want)
	}
	if held, out := co.hold(heldFrame{oc: oc, b: testFrame(4)}); held || len(out) != 0 {
		t.Fatalf("after the last seal: held %v, out %d", held, len(out))
	}

	// yieldHold counts itself only while it yields: alone, its frame is
	// its own to write, and the count is back to zero.
	if held, out := co.yieldHold(heldFrame{oc: oc, b: testFrame(5)}); held || len(out) != 0 || co.sealing != 0 {
		t.Fatalf("yieldHold alone: held %v, out %d, sealing %d", held, len(out), co.sealing)
	}
	co.beginSeal()
	if held, _ := co.yieldHold(heldFrame{oc: oc, b: testFrame(6)}); !held || co.sealing != 1 {
		t.Fatalf("yieldHold while another seals: held %v, sealing %d", held, co.sealing)
	}
	co.endSeal()
	if got := w.got(); len(got) != 2 || !bytes.Equal(got[1], testFrame(6)) {
		t.Fatalf("writes %q, want the frame yieldHold held written by the last sealer", got)
	}
}

func TestCoalescerBounds(t *testing.T) {
	l, oc, w := coalescerConn(t)
	co := &l.co
	co.beginSeal()
	defer co.endSeal()
	for i := range maxHeldFrames {
		if held, _ := co.hold(heldFrame{oc: oc, b: testFrame(i)}); !held {
			t.Fatalf("frame %d not held, under the bound of %d", i, maxHeldFrames)
		}
	}
	held, out := co.hold(heldFrame{oc: oc, b: testFrame(maxHeldFrames)})
	if held || len(out) != maxHeldFrames {
		t.Fatalf("past the frame bound: held %v, out %d, want the %d held handed back", held, len(out), maxHeldFrames)
	}
	if err := writeHeld(append(out, heldFrame{oc: oc, b: testFrame(maxHeldFrames)})); err != nil {
		t.Fatal(err)
	}
	if got := w.got(); len(got) != 1 || !bytes.HasSuffix(got[0], testFrame(maxHeldFrames)) || !bytes.HasPrefix(got[0], testFrame(0)) {
		t.Fatalf("want one write of all %d frames in order, got %d writes", maxHeldFrames+1, len(got))
	}

	// Bytes: a frame that would take the held bytes past the bound is
	// not held.
	big := bytes.Repeat([]byte{'x'}, maxHeldBytes/2+1)
	if held, _ := co.hold(heldFrame{oc: oc, b: big}); !held {
		t.Fatal("first large frame not held")
	}
	if held, out := co.hold(heldFrame{oc: oc, b: big}); held || len(out) != 1 {
		t.Fatalf("past the byte bound: held %v, out %d", held, len(out))
	}
}

// A held frame whose send gave up before it was written (its id no longer
// waits for an ack) is not written: a send reported as failed is not
// delivered behind the caller's back.
func TestCoalescerSkipsAbandoned(t *testing.T) {
	l, oc, w := coalescerConn(t)
	gaveUp, waits := identity.NewUUID(), identity.NewUUID()
	oc.pending[waits] = make(chan ackResult, 1)
	l.co.beginSeal()
	for i, id := range []identity.UUID{gaveUp, waits} {
		if held, _ := l.co.hold(heldFrame{oc: oc, b: testFrame(i), id: id, waiting: true}); !held {
			t.Fatalf("frame %d not held", i)
		}
	}
	l.co.endSeal()
	if got := w.got(); len(got) != 1 || !bytes.Equal(got[0], testFrame(1)) {
		t.Fatalf("writes %q, want only the frame whose send still waits", got)
	}
}

// While the connection's writer is busy (here: its lock held, as during
// a write to a peer that reads slowly), the send that ends the last seal
// does not wait for it: the frames it took are written once the writer
// is done.
func TestCoalescerBusyWriter(t *testing.T) {
	l, oc, w := coalescerConn(t)
	oc.wmu.Lock()
	l.co.beginSeal()
	if held, _ := l.co.hold(heldFrame{oc: oc, b: testFrame(1)}); !held {
		t.Fatal("not held")
	}
	ended := make(chan struct{})
	go func() {
		l.co.endSeal()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("endSeal waited for the busy writer")
	}
	if n := len(w.got()); n != 0 {
		t.Fatalf("%d writes while the writer was busy", n)
	}
	oc.wmu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); len(w.got()) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the frame was not written once the writer was done")
		}
	}
	if got := w.got(); len(got) != 1 || !bytes.Equal(got[0], testFrame(1)) {
		t.Fatalf("writes %q", got)
	}
}

// A held frame for a connection whose write fails fails that connection,
// which tells its waiting sends (here: the one registered in pending).
func TestCoalescerWriteFailure(t *testing.T) {
	l, oc, w := coalescerConn(t)
	w.fail = true
	ch := make(chan ackResult, 1)
	oc.pending[identity.NewUUID()] = ch
	l.co.beginSeal()
	if held, _ := l.co.hold(heldFrame{oc: oc, b: testFrame(1)}); !held {
		t.Fatal("not held")
	}
	l.co.endSeal()
	select {
	case res := <-ch:
		if !errors.Is(res.err, errConnLost) {
			t.Fatalf("waiting send told %v, want errConnLost", res.err)
		}
	default:
		t.Fatal("the waiting send was not told of the failed write")
	}
	if !oc.isDone() || !w.closed {
		t.Fatal("connection not failed and closed")
	}
}

// Many sends sealing and holding at once on two connections: every frame
// is written exactly once, on its own connection. (Frames of one sender
// may go out of order here, as concurrent sends may: a send waits for its
// ack, so one caller never has two in flight.)
func TestCoalescerConcurrent(t *testing.T) {
	l, oc1, w1 := coalescerConn(t)
	oc2 := newOutConn(l, &writeRecorder{})
	w2 := oc2.c.(*writeRecorder)
	const senders, each = 8, 200
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 1))
			for i := range each {
				oc := oc1
				if s%2 == 1 {
					oc = oc2
				}
				f := fmt.Appendf(nil, "<%d.%d>", s, i)
				l.co.beginSeal()
				if rng.IntN(4) == 0 {
					time.Sleep(time.Microsecond)
				}
				l.co.endSeal()
				hold := l.co.hold
				if rng.IntN(2) == 0 {
					hold = l.co.yieldHold
				}
				if held, out := hold(heldFrame{oc: oc, b: f}); !held {
					if err := writeHeld(append(out, heldFrame{oc: oc, b: f})); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	// Frames taken while a writer was busy are written by a goroutine of
	// their own (writeFrames): wait for every frame to be out, then count.
	written := func() int {
		return bytes.Count(bytes.Join(append(w1.got(), w2.got()...), nil), []byte("<"))
	}
	for deadline := time.Now().Add(10 * time.Second); written() < senders*each; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames written", written(), senders*each)
		}
	}
	for i, w := range []*writeRecorder{w1, w2} {
		all := bytes.Join(w.got(), nil)
		for s := range senders {
			want := 0
			if s%2 == i {
				want = 1
			}
			for j := range each {
				f := fmt.Appendf(nil, "<%d.%d>", s, j)
				if n := bytes.Count(all, f); n != want {
					t.Fatalf("frame %s written %d times on connection %d, want %d", f, n, i+1, want)
				}
			}
		}
	}
}

// Between two Routers: sends whose frames are ready while a send on the
// link is still sealing are held, and go out in one write when it ends;
// the receiver reads them together and verifies them as one batch, and
// every one of the sends completes.
func TestHeldFramesGoOutTogether(t *testing.T) {
	for _, network := range []string{"uds", "tcp", "tls"} {
		t.Run(network, func(t *testing.T) {
			testutil.CheckGoroutines(t)
			a, b := pair(t, network, Options{})
			ctx := ctxT(t)
			// The first envelope authenticates the connection: only then
			// does the receiver verify in batches.
			if _, err := a.r.SendMessage(ctx, "bob", "first"); err != nil {
				t.Fatal(err)
			}
			p, err := a.r.ResolvePeer("bob")
			if err != nil {
				t.Fatal(err)
			}
			lk, err := a.r.link(p)
			if err != nil {
				t.Fatal(err)
			}
			lk.co.beginSeal() // a send sealing: frames ready meanwhile wait for it
			const n = 10
			errs := make(chan error, n)
			for i := range n {
				go func() {
					_, err := a.r.SendMessage(ctx, "bob", fmt.Sprint("held ", i))
					errs <- err
				}()
			}
			held := func() int {
				lk.co.mu.Lock()
				defer lk.co.mu.Unlock()
				return len(lk.co.held)
			}
			waitHeld := func(want int) {
				for deadline := time.Now().Add(10 * time.Second); held() < want; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d of %d frames held", held(), want)
					}
				}
			}
			waitHeld(n)
			// One more send gives up while its frame is held: it reports
			// its context's error, and its envelope is never written.
			giveUp, cancel := context.WithCancel(ctx)
			gaveUp := make(chan error, 1)
			go func() {
				_, err := a.r.SendMessage(giveUp, "bob", "abandoned")
				gaveUp <- err
			}()
			waitHeld(n + 1)
			cancel()
			if err := <-gaveUp; !errors.Is(err, context.Canceled) {
				t.Fatalf("the send that gave up returned %v, want context.Canceled", err)
			}
			if got := b.r.Inbox().Len(); got != 1 {
				t.Fatalf("bob holds %d items before the held frames are written, want 1", got)
			}
			before := b.r.batchVerified.Load()
			lk.co.endSeal()
			for range n {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if got := b.r.Inbox().Len(); got != n+1 {
				t.Fatalf("bob holds %d items, want %d (not the abandoned one)", got, n+1)
			}
			if got := b.r.batchVerified.Load() - before; got != n {
				t.Fatalf("bob verified %d of the %d held envelopes in a batch, want all of them (written at once)", got, n)
			}
		})
	}
}
