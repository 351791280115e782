package comms

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
)

// outConn is one persistent outbound connection: a writeLoop that
// coalesces queued frames into few writes, and readers (the senders
// waiting for acks, or readLoop when it is idle) that match acks to
// waiting senders by id.
type outConn struct {
	l  *link
	c  net.Conn
	wq chan outFrame // frames to write; bounded, senders block with their ctx

	mu      sync.Mutex // guards pending, pendingSince, err, acks, lastAck, gate
	pending map[identity.UUID]chan ackResult
	// pendingSince is when pending last became non-empty.
	pendingSince time.Time
	err          error
	acks         int
	lastAck      time.Time
	gate         chan struct{} // closed (and replaced) when the first-ack gate may have opened
	done         chan struct{} // closed by fail

	wmu    sync.Mutex    // held while writing: by writeLoop, or a sender writing inline
	bw     *bufio.Writer // guarded by wmu
	hinted bool          // the acks hint is written; guarded by wmu

	// Reading: whoever holds the read token reads c and hands each ack
	// to its sender: a sender waiting for its ack when nobody else
	// reads (so a lone send needs no other goroutine), or readLoop once
	// the connection has been idle for idleRead (so that the peer closing
	// it, or sending us something, is seen then).
	rtok     chan struct{}     // holds the token while nobody reads
	fr       *transport.Reader // used by the token's holder only
	lastWait atomic.Int64      // Unix ns when a send last began to wait for an ack
	lastRead atomic.Int64      // Unix ns when a frame was last read
	inbound  chan []byte       // non-ack frames a sender read, for readLoop to receive
	dlmu     sync.Mutex        // orders read-deadline changes; guards the two below
	readSess uint64            // the current read session: a late deadline change is ignored
	readerCh chan ackResult    // the reading send's outcome channel, nil if none
}

// idleRead is how long an outbound connection goes without a send
// waiting for an ack before readLoop takes over reading it.
const idleRead = 20 * time.Millisecond

func newOutConn(l *link, c net.Conn) *outConn {
	oc := &outConn{l: l, c: c, wq: make(chan outFrame, writeQueueLen), pending: map[identity.UUID]chan ackResult{},
		gate: make(chan struct{}), done: make(chan struct{}), bw: bufio.NewWriterSize(c, 16<<10),
		rtok: make(chan struct{}, 1), fr: transport.NewReader(c, l.r.opts.MaxMessageBytes),
		inbound: make(chan []byte, inboundQueueLen)}
	oc.rtok <- struct{}{}
	oc.lastWait.Store(time.Now().UnixNano())
	return oc
}

// ackResult settles a send waiting for its ack: err, or the ack. An ack
// read from this connection arrives decoded but not verified: the sender
// verifies it on its own goroutine, so with many envelopes in flight the
// acks' signatures are checked in parallel, not one after another on the
// reader. (Acks arriving on an inbound connection were verified there.)
type ackResult struct {
	unverified *wire.Envelope // nil: nothing left to verify
	err        error
}

// settle turns a send's ackResult into its outcome. An ack whose signature
// does not verify ends the connection, as any bad frame from the peer does.
func (oc *outConn) settle(r ackResult) error {
	if r.err != nil {
		return r.err
	}
	if r.unverified != nil && r.unverified.VerifyWith(&oc.l.r.keys) != nil {
		oc.fail(errBadAck)
		return fmt.Errorf("%w: bad signature", errBadAck)
	}
	return nil
}

// outFrame is a frame queued for writing. written, if set, receives the
// outcome of the write that carried it, for sends that wait for no ack
// (responses, acks) yet must not be lost silently.
type outFrame struct {
	b       []byte
	written chan error
	// abandoned is set when the sender gave up (its context ended) before
	// the frame was written: the writer then skips it, so a send reported
	// as failed is not delivered behind the caller's back.
	abandoned *atomic.Bool
}

func (oc *outConn) isDone() bool {
	select {
	case <-oc.done:
		return true
	default:
		return false
	}
}

// send queues frame and, if wantAck, waits for the matching ack. It calls
// queued once the frame is in the connection's write queue.
func (oc *outConn) send(ctx context.Context, id identity.UUID, frame []byte, wantAck bool, queued func(), inline bool) error {
	var ch chan ackResult
	inFlight := 0 // other sends waiting for their acks on oc
	if wantAck {
		ch = make(chan ackResult, 1)
		// Until a new connection has carried its first ack, it carries one
		// envelope at a time: a peer that reads one envelope per
		// connection then shows itself cleanly (closed after an ack, with
		// more in flight) instead of by a reset racing the ack.
		for {
			oc.mu.Lock()
			if oc.err != nil {
				oc.mu.Unlock()
				return errConnLost
			}
			if oc.acks > 0 || len(oc.pending) == 0 {
				break // still holding oc.mu
			}
			gate := oc.gate
			oc.mu.Unlock()
			select {
			case <-gate:
			case <-oc.done:
				return errConnLost
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if len(oc.pending) == 0 {
			oc.pendingSince = time.Now()
		}
		inFlight = len(oc.pending)
		oc.pending[id] = ch
		oc.mu.Unlock()
		defer func() {
			oc.mu.Lock()
			delete(oc.pending, id)
			if oc.acks == 0 && len(oc.pending) == 0 {
				oc.openGateLocked() // gave up before the first ack: let the next one go
			}
			oc.mu.Unlock()
		}()
	}
	if wantAck && inline && len(oc.wq) == 0 {
		// Written here (one hand-off fewer), or left to a send still
		// sealing (coalescer); otherwise the writer is busy: queue it.
		if ok, err := oc.writeNow(id, frame, inFlight > 0); ok {
			if err != nil {
				return errConnLost
			}
			queued()
			return oc.acked(oc.await(ctx, ch), frame)
		}
	}
	of := outFrame{b: frame, abandoned: new(atomic.Bool)}
	if !wantAck {
		of.written = make(chan error, 1)
	}
	select {
	case oc.wq <- of:
		queued()
	case <-oc.done:
		return errConnLost
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() {
		if ctx.Err() != nil {
			of.abandoned.Store(true) // harmless if it was already written
		}
	}()
	if !wantAck {
		// Return once the frame is on the wire. If the connection ends
		// first it may or may not have been written: send again (the
		// receiver drops repeats by id).
		select {
		case err := <-of.written:
			return err
		case <-oc.done:
			select {
			case err := <-of.written:
				return err
			default:
				return errConnLost
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return oc.acked(oc.await(ctx, ch), frame)
}

// await waits for the outcome of a send: an ack routed by whoever reads
// the connection, or, when nobody does, read by the caller itself.
func (oc *outConn) await(ctx context.Context, ch chan ackResult) error {
	start := time.Now()
	oc.lastWait.Store(start.UnixNano())
	for {
		select {
		case r := <-ch:
			return oc.settle(r) // an outcome that is in wins over the context
		default:
		}
		if ctx.Err() != nil {
			oc.failIfSilent(ctx, start)
			return ctx.Err()
		}
		if oc.l.acksKinds.Load() {
			oc.l.r.kp.PrepareNonce() // for the next envelope, while the peer works
		}
		select {
		case r := <-ch:
			return oc.settle(r)
		case <-ctx.Done():
		case <-oc.rtok:
			timedOut := oc.readFor(ctx, ch)
			oc.rtok <- struct{}{}
			if timedOut {
				// The read deadline is the context's (its deadline, or now
				// on cancellation): it is over or about to be.
				select {
				case r := <-ch:
					return oc.settle(r)
				case <-ctx.Done():
				}
			}
		}
	}
}

// failIfSilent fails the connection when a wait for an ack that ran out
// its deadline, after at least the frame timeout, saw no frame at all
// from the peer: a peer that went away without a word, or that left a
// frame (or, over TLS, a record) unfinished, would otherwise keep the
// link on a connection every later send times out on. The next send
// dials again; the receiver's duplicate filter makes a resend harmless.
// A wait its caller cancelled, or gave less than the frame timeout,
// proves nothing.
func (oc *outConn) failIfSilent(ctx context.Context, start time.Time) {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Since(start) < oc.l.r.opts.FrameTimeout || oc.lastRead.Load() >= start.UnixNano() {
		return
	}
	oc.fail(fmt.Errorf("%w: nothing came from the peer for %v while a send waited for its ack", errConnLost, time.Since(start).Round(time.Millisecond)))
}

// readFor reads the connection, as the holder of the read token, until
// ch holds the caller's outcome, the caller's context ends (timedOut), or
// the connection fails (fail tells every waiting send). It waits for
// whole frames before it consumes them, so a context that ends leaves the
// stream in step for the next reader. An ack that reaches ch another way
// (on an inbound connection) cuts the wait short.
func (oc *outConn) readFor(ctx context.Context, ch chan ackResult) (timedOut bool) {
	dl, _ := ctx.Deadline()
	sess := oc.startRead(dl, ch)
	stop := context.AfterFunc(ctx, func() { oc.cutRead(sess) })
	defer func() {
		oc.startRead(time.Time{}, nil) // ends the session: a late cut leaves the next reader alone
		stop()
	}()
	for len(ch) == 0 {
		if err := oc.fr.PeekFrame(); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return len(ch) == 0 // nothing consumed: the stream is in step
			}
			oc.fail(tlsRefused(err))
			return false
		}
		if !oc.fr.FrameBuffered() {
			// Too large for the read-ahead (no ack is): read it under the
			// frame timeout, not the caller's context.
			oc.startRead(time.Now().Add(oc.l.r.opts.FrameTimeout), ch)
		}
		if err := oc.readFrame(true); err != nil {
			oc.fail(err)
			return false
		}
	}
	// Hand on, without blocking, the acks already read ahead: with many
	// in flight they arrive together, and their senders need not take
	// the token in turn for them.
	for oc.fr.FrameBuffered() {
		if err := oc.readFrame(true); err != nil {
			oc.fail(err)
			return false
		}
	}
	return false
}

// startRead starts a read session with deadline dl (zero: none) for the
// send waiting on ch (nil: readLoop, or no session) and returns its number.
func (oc *outConn) startRead(dl time.Time, ch chan ackResult) uint64 {
	oc.dlmu.Lock()
	defer oc.dlmu.Unlock()
	oc.readSess++
	oc.readerCh = ch
	oc.c.SetReadDeadline(dl)
	return oc.readSess
}

// cutRead ends the wait of read session sess, if it is still the current
// one, by moving the read deadline to now.
func (oc *outConn) cutRead(sess uint64) {
	oc.dlmu.Lock()
	if oc.readSess == sess {
		oc.c.SetReadDeadline(time.Now())
	}
	oc.dlmu.Unlock()
}

// wakeReader cuts short the wait of the send reading for ch, if one is.
func (oc *outConn) wakeReader(ch chan ackResult) {
	oc.dlmu.Lock()
	if oc.readerCh == ch {
		oc.c.SetReadDeadline(time.Now())
	}
	oc.dlmu.Unlock()
}

// openGateLocked wakes the sends waiting at the first-ack gate; oc.mu is
// held.
func (oc *outConn) openGateLocked() {
	close(oc.gate)
	oc.gate = make(chan struct{})
}

func (oc *outConn) writeLoop() {
	bw := oc.bw
	var notify []chan error // written channels of the frames in this batch
	for {
		select {
		case f := <-oc.wq:
			oc.wmu.Lock()
			oc.c.SetWriteDeadline(time.Now().Add(oc.l.r.opts.AckTimeout))
			notify = notify[:0]
			if !f.isAbandoned() {
				bw.Write(oc.hint(f.b))
				notify = appendNotify(notify, f)
			}
			// Coalesce whatever else is queued into the same write.
		more:
			for {
				select {
				case f := <-oc.wq:
					if !f.isAbandoned() {
						bw.Write(oc.hint(f.b))
						notify = appendNotify(notify, f)
					}
				default:
					break more
				}
			}
			err := bw.Flush()
			oc.wmu.Unlock()
			if err != nil {
				// The peer may simply have closed after its last ack
				// (one envelope per connection): unacknowledged sends
				// retry on a new connection.
				err = fmt.Errorf("%w: %v", errConnLost, err)
			}
			for _, ch := range notify {
				ch <- err
			}
			if err != nil {
				oc.fail(err)
				return
			}
		case <-oc.done:
			return
		}
	}
}

// hint returns frame with the acks hint (wire.Envelope.AcksHint) added
// if no frame the connection wrote before carried it: the receiver then
// acknowledges what comes on it with acks kinds. The hint is only
// written once, so later frames go out as they were sealed; oc.wmu is
// held. It is asked for only by a node whose own limit holds the largest
// acks envelope a peer seals (acksFrameMax), and rides only on a frame
// that stays, with it, within transport.MinFrameLimit or within the size
// of a frame the peer has acknowledged on this link: the peer's limit
// may be below ours, but not below either, so the hint never makes a
// frame the peer would refuse.
func (oc *outConn) hint(frame []byte) []byte {
	r := oc.l.r
	if oc.hinted || r.opts.SingleAcks || r.opts.MaxMessageBytes < acksFrameMax {
		return frame
	}
	if n := len(frame) - transport.HeaderSize; wire.HintedLen(n) > max(transport.MinFrameLimit, int(oc.l.maxAcked.Load())) {
		// It could take the envelope past the peer's limit: it goes as
		// it was sealed, and the hint on a later frame.
		return frame
	}
	out, start := transport.StartFrame(make([]byte, 0, len(frame)+16))
	out, ok := wire.AppendHinted(out, frame[min(len(frame), transport.HeaderSize):])
	oc.hinted = true
	if !ok || transport.FinishFrame(out, start) != nil {
		return frame
	}
	return out
}

// acksFrameMax bounds the payload of an acks envelope a node seals (its
// ids, and room for the rest): a node asks for acks kinds only if its own
// limit takes one.
const acksFrameMax = maxAcksPerEnvelope*16 + 1024

// acked records, when err is nil, that the peer acknowledged frame: it
// takes frames that large (the hint's rule).
func (oc *outConn) acked(err error, frame []byte) error {
	if err == nil {
		n := int64(len(frame) - transport.HeaderSize)
		for {
			m := oc.l.maxAcked.Load()
			if n <= m || oc.l.maxAcked.CompareAndSwap(m, n) {
				break
			}
		}
	}
	return err
}

func (f outFrame) isAbandoned() bool { return f.abandoned != nil && f.abandoned.Load() }

func appendNotify(notify []chan error, f outFrame) []chan error {
	if f.written != nil {
		notify = append(notify, f.written)
	}
	return notify
}

// inboundQueueLen bounds the non-ack frames a reading send hands to
// readLoop (a peer rarely sends any on our connection).
const inboundQueueLen = 16

// readLoop is the connection's own reader. It receives the non-ack
// frames that reading sends come across (so that a Router's Close waits
// for every delivery), and reads the connection itself once no send has
// waited for an ack for idleRead: then it takes the read token and waits
// for frames (an ack of a send that began meanwhile, something the peer
// sends us, or the end of the stream), giving the token back after each
// batch for as long as the connection stays idle.
func (oc *outConn) readLoop() {
	t := time.NewTimer(idleRead)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case p := <-oc.inbound:
			if err := oc.receiveInbound(p); err != nil {
				oc.fail(err)
				return
			}
			continue
		case <-oc.done:
			return
		}
		for {
			if d := time.Since(time.Unix(0, oc.lastWait.Load())); d < idleRead {
				t.Reset(idleRead - d)
				break
			}
			if err := oc.readIdle(); err != nil {
				oc.fail(err)
				return
			}
		}
	}
}

// readIdle takes the read token (receiving handed-on frames while it
// waits for it), reads at least one frame or the end of the stream, and
// gives the token back.
func (oc *outConn) readIdle() error {
	for got := false; !got; {
		select {
		case <-oc.rtok:
			got = true
		case p := <-oc.inbound:
			if err := oc.receiveInbound(p); err != nil {
				return err
			}
		case <-oc.done:
			return errConnLost
		}
	}
	defer func() { oc.rtok <- struct{}{} }()
	oc.startRead(time.Time{}, nil)
	if err := oc.fr.Peek(); err != nil {
		return fmt.Errorf("%w: %v", errConnLost, err)
	}
	// A frame has begun: it must be whole within the frame timeout, or
	// the connection goes (a peer that stalls mid-frame would otherwise
	// hold the read token for ever).
	oc.startRead(time.Now().Add(oc.l.r.opts.FrameTimeout), nil)
	for {
		if err := oc.readFrame(false); err != nil {
			return err
		}
		if !oc.fr.FrameBuffered() {
			return nil
		}
	}
}

// readFrame reads one frame and handles it: an ack goes to its sender
// (who verifies it); anything else the peer sends on our connection is
// received as inbound and answered on it — by readLoop: a reading send
// (bySend) hands it a copy.
func (oc *outConn) readFrame(bySend bool) error {
	payload, err := oc.fr.ReadFrame()
	if err != nil {
		return fmt.Errorf("%w: %v", errConnLost, err)
	}
	oc.lastRead.Store(time.Now().UnixNano())
	e, err := wire.Decode(payload)
	if err != nil || e.To != oc.l.r.self || e.From != oc.l.peer.ID {
		return errBadAck // a peer that sends garbage on our connection loses it
	}
	switch e.Kind.Type() {
	case wire.TypeAck:
		oc.routeAck(&e, false) // its sender verifies it
		return nil
	case wire.TypeAcks:
		// One signature for many sends: checked here, once.
		if e.VerifyWith(&oc.l.r.keys) != nil {
			return errBadAck
		}
		if !oc.l.acksKinds.Load() {
			// Only for the link's current connection: one that has
			// ended (connEnded cleared the flag) says nothing of the next.
			oc.l.mu.Lock()
			if oc.l.conn == oc {
				oc.l.acksKinds.Store(true)
			}
			oc.l.mu.Unlock()
		}
		oc.routeAck(&e, true)
		return nil
	}
	if !bySend {
		return oc.receiveInbound(payload)
	}
	select {
	case oc.inbound <- bytes.Clone(payload):
		return nil
	case <-oc.done:
		return errConnLost
	}
}

// receiveInbound admits an envelope the peer sent on our connection and
// queues its ack there.
func (oc *outConn) receiveInbound(payload []byte) error {
	e, ok, reason := oc.l.r.receive(payload, nil, nil)
	if reason != "" {
		oc.l.r.reject(reason)
		return errBadAck // the peer sent us something we refuse: drop the connection
	}
	if ok {
		acks := ackBuf{r: oc.l.r} // a single ack, counted and sealed as on inbound connections
		acks.add(e.From, e.ID)
		ack := acks.take()
		if len(ack) == 0 {
			return nil // could not be sealed (logged)
		}
		select {
		case oc.wq <- outFrame{b: ack}:
		case <-oc.done:
			return errConnLost
		}
	}
	return nil
}

// ackArrived routes an ack or acks verified elsewhere (on an inbound
// connection); the sends it settles that are reading this connection
// have their wait cut short.
func (oc *outConn) ackArrived(e wire.Envelope) {
	for _, ch := range oc.routeAck(&e, true) {
		oc.wakeReader(ch)
	}
}

// routeAck hands an ack, or each id of an acks, to the send waiting for
// it and returns those sends' channels; verified says whether its
// signature was checked already (if not, the sender checks it: only a
// single ack comes unverified).
func (oc *outConn) routeAck(e *wire.Envelope, verified bool) []chan ackResult {
	if oc.l.validAck(*e) != nil {
		return nil
	}
	var buf [1]identity.UUID
	ids := e.Kind.AckedIDs(buf[:0])
	var settled []chan ackResult
	oc.mu.Lock()
	for _, id := range ids {
		ch := oc.pending[id]
		if ch == nil {
			continue // given up on, or acked before
		}
		delete(oc.pending, id)
		settled = append(settled, ch)
	}
	if len(settled) > 0 {
		first := oc.acks == 0
		oc.acks += len(settled)
		oc.lastAck = time.Now()
		if first {
			oc.openGateLocked()
		}
	}
	oc.mu.Unlock()
	r := ackResult{}
	if !verified {
		r.unverified = e
	}
	for _, ch := range settled {
		ch <- r
	}
	return settled
}

// fail ends the connection, failing every unacknowledged send with err.
// A connection lost (by EOF, reset or a failed write) after at least one
// ack with envelopes still in flight is how a one-envelope-per-connection
// peer looks from here: the link switches mode before the sends retry.
func (oc *outConn) fail(err error) {
	oc.mu.Lock()
	if oc.err != nil {
		oc.mu.Unlock()
		return
	}
	oc.err = err
	pending := oc.pending
	oc.pending = map[identity.UUID]chan ackResult{}
	// The link learns the outcome before any sender does, so a sender
	// that retries already sees the link's new mode. (Lock order: an
	// outConn's mu before its link's; nothing takes them the other way.)
	// A peer that reads one envelope per connection closes right after
	// its ack, with the envelopes pipelined behind it unread. Sends made
	// after the last ack do not count: a connection the receiver closed
	// while idle may take one just before the close is seen.
	unread := len(pending) > 0 && oc.pendingSince.Before(oc.lastAck)
	closedAfterAck := oc.acks > 0 && (unread || time.Since(oc.lastAck) < oneShotCloseWindow)
	oc.l.connEnded(oc, errors.Is(err, errConnLost) && closedAfterAck)
	close(oc.done)
	oc.mu.Unlock()
	oc.c.Close()
	for _, ch := range pending {
		ch <- ackResult{err: err}
	}
}
