package comms

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/identity"
)

// coalescer gathers, on one link, the frames of sends that are ready to
// be written while other sends on the link are still sealing theirs: the
// send that finishes sealing last writes them all at once. A burst of
// sends then costs one write (on TLS, full records) rather than one per
// envelope, and the receiver reads them together and verifies them as one
// batch. Sealing is CPU work that ends within microseconds, never a wait
// (the count covers wire.Seal and the frame's encoding only, not a dial
// or a queue), so a held frame waits at most that long; a lone send, with
// nobody else sealing, is written at once, as without it.
//
// No frame is left behind: one is held only while another send is
// sealing (checked under mu), and the send that ends the last seal takes
// what is held, as does a send that finds no room to hold its own. (A
// frame whose send has given up by then is not written: heldFrame.)
type coalescer struct {
	mu      sync.Mutex
	sealing int         // sends between beginSeal and endSeal
	held    []heldFrame // in the order they were held
	bytes   int         // of held
}

// heldFrame is a frame held for a send waiting for its ack on oc. With
// waiting set it is written only if that send (envelope id) still waits:
// one that gave up (its context ended) was reported as failed, and its
// envelope must not be delivered behind the caller's back (as
// outFrame.abandoned).
type heldFrame struct {
	oc      *outConn
	b       []byte
	id      identity.UUID
	waiting bool
}

// The frames held at once are bounded: past these, a send writes what is
// held and its own frame rather than wait for the others. maxHeldBytes
// fits an outConn's write buffer, so they go out in one write.
const (
	maxHeldFrames = maxBatch
	maxHeldBytes  = 16 << 10
)

// beginSeal counts a send that has started sealing its envelope; it must
// be followed by exactly one endSeal.
func (c *coalescer) beginSeal() {
	c.mu.Lock()
	c.sealing++
	c.mu.Unlock()
}

// endSeal ends a seal begun with beginSeal; if it was the last one, what
// is held is written now.
func (c *coalescer) endSeal() {
	c.mu.Lock()
	c.sealing--
	var out []heldFrame
	if c.sealing == 0 {
		out = c.takeLocked()
	}
	c.mu.Unlock()
	writeHeld(out)
}

// hold keeps f to be written by a send still sealing, if
// there is one and there is room. Otherwise it returns false and the
// frames held so far, which the caller writes before its own.
func (c *coalescer) hold(f heldFrame) (held bool, out []heldFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holdLocked(f)
}

// yieldHold is hold for a send on a connection that has other sends in
// flight: it first lets the goroutines ready to run go ahead (their acks
// have just come in, and they are about to seal the next envelopes),
// counted as sealing meanwhile so that what they finish is held for it,
// then holds its frame, or takes the others' and writes them with its
// own. With only its own send in flight a caller uses hold, and a lone
// send is not delayed.
func (c *coalescer) yieldHold(f heldFrame) (held bool, out []heldFrame) {
	c.beginSeal()
	runtime.Gosched()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sealing-- // in the same critical section as the hold: nothing is left behind
	return c.holdLocked(f)
}

// holdLocked is hold with c.mu held.
func (c *coalescer) holdLocked(f heldFrame) (held bool, out []heldFrame) {
	if c.sealing > 0 && len(c.held) < maxHeldFrames && c.bytes+len(f.b) <= maxHeldBytes {
		c.held = append(c.held, f)
		c.bytes += len(f.b)
		return true, nil
	}
	return false, c.takeLocked()
}

// takeLocked returns the frames held and empties the list; c.mu is held.
func (c *coalescer) takeLocked() []heldFrame {
	out := c.held
	c.held, c.bytes = nil, 0
	return out
}

// writeNow writes the frame of send id at once with any frames held, or
// holds it for a send still sealing (with others in flight on oc, after
// letting the ready goroutines go first: yieldHold). false means none of
// that: nothing is held and the connection's writer is busy, so the
// caller queues the frame. err is a failed write (the connection failed).
func (oc *outConn) writeNow(id identity.UUID, frame []byte, othersInFlight bool) (ok bool, err error) {
	hold := oc.l.co.hold
	if othersInFlight {
		hold = oc.l.co.yieldHold
	}
	held, out := hold(heldFrame{oc: oc, b: frame, id: id, waiting: true})
	switch {
	case held:
		return true, nil
	case len(out) > 0:
		return true, writeHeld(append(out, heldFrame{oc: oc, b: frame}))
	case oc.wmu.TryLock():
		return true, oc.writeFramesLocked([]heldFrame{{oc: oc, b: frame}})
	}
	return false, nil
}

// writeHeld writes frames, each run for the same connection in one write,
// and returns the error of the last run. A failed write fails its
// connection, which tells the sends waiting on it.
func writeHeld(frames []heldFrame) error {
	var err error
	for len(frames) > 0 {
		oc := frames[0].oc
		n := 1
		for n < len(frames) && frames[n].oc == oc {
			n++
		}
		err = oc.writeFrames(frames[:n])
		frames = frames[n:]
	}
	return err
}

// writeFrames writes frames (all for oc) and flushes them at once. When
// the connection's writer is busy (a write to a peer that reads slowly
// may last up to the ack timeout), a goroutine of their own writes them
// once it is done, so that no send waits on another's write past its own
// context, as none did before frames were held; it returns nil then, and
// a failed write reaches the waiting sends through oc.fail.
func (oc *outConn) writeFrames(frames []heldFrame) error {
	if oc.wmu.TryLock() {
		return oc.writeFramesLocked(frames)
	}
	go func() {
		oc.wmu.Lock()
		oc.writeFramesLocked(frames)
	}()
	return nil
}

// writeFramesLocked is writeFrames with oc.wmu held; it unlocks it. A
// frame whose send no longer waits is skipped. (oc.mu is taken inside
// oc.wmu here; nothing takes them the other way round.)
func (oc *outConn) writeFramesLocked(frames []heldFrame) error {
	locked := false // oc.mu, taken only for a held frame (a lone write needs no look)
	for i, f := range frames {
		if !f.waiting {
			continue
		}
		if !locked {
			oc.mu.Lock()
			locked = true
		}
		if _, ok := oc.pending[f.id]; !ok {
			frames[i].b = nil // its send gave up: not written
		}
	}
	if locked {
		oc.mu.Unlock()
	}
	oc.c.SetWriteDeadline(time.Now().Add(oc.l.r.opts.AckTimeout))
	var err error
	for _, f := range frames {
		if f.b == nil {
			continue
		}
		if _, err = oc.bw.Write(oc.hint(f.b)); err != nil {
			break
		}
	}
	if err == nil {
		err = oc.bw.Flush()
	}
	oc.wmu.Unlock()
	if err != nil {
		err = fmt.Errorf("%w: %v", errConnLost, err)
		oc.fail(err)
	}
	return err
}
