package comms

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/inbox"
	"github.com/meerkatd/meerkatd/transport"
)

// errTooManyFiles is the accept error of a process out of descriptors.
var errTooManyFiles = syscall.EMFILE

// maxPendingAcks is how many bytes of acks a connection buffers before it
// writes them even though more pipelined input is waiting.
const maxPendingAcks = 16 << 10

// maxBatch bounds the frames a connection reads, verifies and admits as
// one batch: those wholly read ahead, after the one it waited for.
const maxBatch = 64

// splitBatch is the size from which verifyBatch verifies a batch as two
// halves at once.
const splitBatch = 16

// sigCheck is what a batch found of an envelope's signature.
type sigCheck int8

const (
	sigUnchecked sigCheck = iota // the receive checks it alone
	sigGood
	sigBad
)

// inFrame is one frame of a batch: its envelope decoded, or the reason it
// is refused.
type inFrame struct {
	e    wire.Envelope
	size int
	bad  string   // RejectFrame or RejectMalformed: the connection ends here
	err  error    // the read error behind RejectFrame
	sig  sigCheck // what the batch found of its signature
	// route is routeRefusal's reason when it refused the envelope as it
	// was decoded; e then has only its id, sender and recipient.
	route string
}

// serveConn reads frames from an inbound connection until EOF, an error or
// Close, acknowledging what it admits. It reads the frames that have
// arrived together as a batch, verifies their signatures as one (on a
// connection already authenticated), then checks and admits them in
// order; its ackLoop settles admissions and writes the acks, so reading,
// verifying and admitting the next frames goes on while earlier
// admissions commit (through an [AsyncAdmitter]) and their acks are
// sealed. At most maxPendingAdmissions jobs wait in the ack queue, then
// the reader waits for room. The acks of admissions already done go out
// after each batch, those ackLoop holds (admissions still committing
// when the reader moved on) when nothing more is buffered: one per
// envelope, or one acks envelope for all of them where the sender said it
// takes them (wire.Envelope.AcksHint).
func (r *Router) serveConn(c net.Conn, st *inConn) {
	defer r.untrack(c)
	defer c.Close()
	c, fr, ok := r.openConn(c, st)
	if !ok {
		return
	}
	defer fr.Release() // after the reader's last frame: below, ackLoop is waited for
	q := make(chan ackJob, maxPendingAdmissions)
	var stopped atomic.Bool // set by ackLoop: stop reading
	aw := &ackWriter{c: c}  // ackLoop's batches, or the reader's inline acks
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		r.ackLoop(c, st, q, &stopped, aw)
	}()
	acks := ackBuf{r: r, st: st} // the acks the reader seals itself
	held := false                // ackLoop may hold acks: jobs queued since the last flush job
	defer func() {               // acks of admitted envelopes go out even when we stop
		if !acks.empty() {
			q <- ackJob{frame: acks.detach()}
		}
		close(q)
		<-settled // ackLoop settles and acks what is queued, then returns
	}()
	// sendAcks writes the reader's acks now if ackLoop is idle, or hands
	// them to it; false means the connection is done with.
	sendAcks := func() bool {
		if acks.empty() {
			return true
		}
		if len(q) == 0 && aw.mu.TryLock() {
			err := aw.writeLocked(acks.take(), r.opts.AckTimeout)
			aw.mu.Unlock()
			return err == nil
		}
		q <- ackJob{frame: acks.detach()}
		held = true
		return true
	}
	var pending []pendingAdmission // filled by receive, handed to ackLoop
	var batch []inFrame
	var verifier *batchVerifier
	_, isTLS := c.(*tls.Conn)
	// noInput reports whether nothing more can be read without waiting:
	// then the acks ackLoop holds go out now rather than with the next
	// frames' acks.
	noInput := func() bool {
		if fr.Buffered() > 0 {
			return false
		}
		return !isTLS || !r.pollTLS(c, fr)
	}
	budgeted := st.tlsPeer.IsZero() // openConn gave fr the strangers' budget
	unbudget := func() {
		if budgeted && st.authed.Load() {
			fr.SetBudget(nil) // a trusted peer now: its frames are its own
			budgeted = false
		}
	}
	for {
		unbudget()
		if !r.awaitFrame(c, fr, st, &stopped) {
			return
		}
		// Again: ackLoop may have authenticated the connection while we
		// waited (its admission settled after we looked), and the peer
		// may have sent this frame on seeing the ack.
		unbudget()
		batch, ok = r.readBatch(c, fr, st, &stopped, batch[:0])
		if !ok {
			return // ackLoop cut the frame short; it is not the peer's fault
		}
		r.verifyBatch(st, batch, &verifier)
		for i := range batch {
			f := &batch[i]
			if f.bad != "" {
				r.reject(f.bad)
				r.observeSt(st, EventRefused, nil, "", f.size, f.bad)
				r.log.Debug("refused frame", "reason", f.bad, "err", f.err)
				return
			}
			var ack, fresh bool
			var from identity.PeerID
			var reason string
			if f.route != "" {
				from, reason = f.e.From, f.route
				r.refuseRoute(st, &f.e, f.size, reason)
			} else {
				ack, fresh, from, reason = r.receiveDecoded(f.e, f.size, st, &pending, f.sig)
				if f.e.AcksHint && reason == "" {
					// Taken from an envelope that verified only: the
					// hint is not signed, but a refused frame's is
					// not the peer's.
					st.acksOK.Store(true)
				}
			}
			if fresh && reason == "" {
				// Only a new envelope authenticates a connection:
				// replaying a captured one earns nothing.
				r.authenticate(st, from)
			}
			for _, p := range pending {
				job := ackJob{adm: p.adm, key: p.key, ev: p.ev, claimed: p.claimed}
				// Admitted already and ackLoop idle: settle here,
				// without a hand-off. Otherwise ackLoop settles it
				// while we verify the next envelope.
				if p.adm.Ready() && len(q) == 0 && !held {
					if r.settle(st, job, &acks) != "" {
						return
					}
					continue
				}
				q <- job // ackLoop always drains q: this waits only for room
				held = true
			}
			clear(pending)
			pending = pending[:0]
			if reason != "" {
				r.reject(reason)
				r.logRefused(reason, from)
				return
			}
			if ack {
				acks.add(from, f.e.ID)
			}
			if acks.size() >= maxPendingAcks && !sendAcks() {
				return
			}
		}
		clear(batch) // let go of the envelopes' kinds
		if budgeted {
			// Still a stranger (a replay earns nothing): the memory of a
			// large frame goes back to the strangers now, not when the
			// connection next reads or ends.
			fr.Trim()
		}
		// The batch's acks go out now, even with more input read ahead:
		// a sender keeping many envelopes in flight gets them back batch
		// by batch, rather than only once it has stopped to wait.
		if !sendAcks() {
			return
		}
		if (held || st.acksOK.Load()) && noInput() {
			if held {
				// Nothing more to read now: the acks ackLoop holds go out too.
				q <- ackJob{flush: true}
				held = false
			}
			if st.acksOK.Load() {
				r.kp.PrepareNonce() // for the next acks, while the peer works
			}
		}
	}
}

// readBatch reads the frame whose first byte awaitFrame saw and then
// every whole frame already read ahead (over TLS, in every record the
// last read of the socket took: moreTLS), up to maxBatch, decoding each; a
// frame that cannot be read or decoded ends the batch, marked bad. false
// means ackLoop stopped the connection while a frame was being read.
func (r *Router) readBatch(c net.Conn, fr *transport.Reader, st *inConn, stopped *atomic.Bool, batch []inFrame) ([]inFrame, bool) {
	c.SetReadDeadline(time.Now().Add(r.opts.FrameTimeout))
	_, isTLS := c.(*tls.Conn)
	for {
		payload, err := fr.ReadFrame()
		if err != nil {
			if stopped.Load() {
				return batch, false
			}
			bad := RejectFrame
			if errors.Is(err, transport.ErrOverBudget) {
				bad = RejectOverload
			}
			return append(batch, inFrame{bad: bad, err: err}), true
		}
		var route string
		e, err := wire.DecodeFor(payload, func(from, to identity.PeerID) bool {
			route = r.routeRefusal(st, from, to)
			return route == ""
		})
		switch {
		case errors.Is(err, wire.ErrNotAccepted): // its kind not even decoded
			return append(batch, inFrame{e: e, size: len(payload), route: route}), true
		case err != nil:
			return append(batch, inFrame{bad: RejectMalformed, size: len(payload), err: err}), true
		}
		batch = append(batch, inFrame{e: e, size: len(payload)})
		if len(batch) == maxBatch {
			return batch, true
		}
		if !fr.FrameBuffered() && (!isTLS || !r.moreTLS(c, fr, stopped)) {
			return batch, true
		}
	}
}

// moreTLS reads into fr, without waiting, the TLS records the last read
// of the socket took (transport.TLSServer reads it through a read-ahead
// of 16 KiB), and reports whether a whole frame is now read ahead. A TLS
// connection returns one record per read where a plain socket returns
// all that has arrived, and a sender writes its frames a group to a
// record: without this, a batch would end at every record, and batches
// over TLS would hold a third of the envelopes they hold over TCP (17
// against 44 on average in the bench), each with its own acks envelope
// to sign and verify. It reads under a deadline already passed (see
// pollTLS), and sets the frame timeout again only for a batch that goes
// on: otherwise the reader's next wait sets the deadline it needs. A
// batch does not go on once ackLoop or Close has stopped the connection
// (their deadline may have been the one it replaced).
func (r *Router) moreTLS(c net.Conn, fr *transport.Reader, stopped *atomic.Bool) bool {
	c.SetReadDeadline(time.Now())
	for fr.ReadMore() && !fr.FrameBuffered() {
	}
	if !fr.FrameBuffered() {
		return false
	}
	c.SetReadDeadline(time.Now().Add(r.opts.FrameTimeout))
	return !stopped.Load() && r.ctx.Err() == nil
}

// verifyBatch checks the signatures of a batch in batches, marking what
// they found; vs holds the connection's verifier (made on first use). Only
// a connection that has proved its peer holds a trusted key (a TLS client
// certificate, or a new envelope already admitted) batches: a stranger's
// first envelope is verified alone, and a bad one ends the connection, as
// it would without batches. The checks stop before the first envelope the
// receive checks would refuse before its signature (not to us, from an
// untrusted key, or over TLS from another key), and at the first bad
// signature: the receive refuses that one and ends the connection, so
// nothing after it is checked. A connection's batches start at two
// envelopes and double with each full batch that verifies, up to
// maxBatch: a holder of a trusted key who proves it once and then sends
// bad signatures costs at most a batch of two and one check more than
// without batches, and a batch of 64 takes 62 valid envelopes first.
// Envelopes left unchecked (one left over at the end) are verified alone
// as they are received. Batch and single verification accept exactly the
// same signatures (package identity).
func (r *Router) verifyBatch(st *inConn, batch []inFrame, vs **batchVerifier) {
	if len(batch) < 2 || (st.tlsPeer.IsZero() && !st.authed.Load()) {
		return
	}
	if *vs == nil {
		*vs = &batchVerifier{size: 2}
	}
	v := *vs
	trusted := r.trust.Load()
	v.envs, v.idx = v.envs[:0], v.idx[:0]
	for i := range batch {
		f := &batch[i]
		if f.bad != "" || f.route != "" || f.e.To != r.self || (!st.tlsPeer.IsZero() && f.e.From != st.tlsPeer) {
			break
		}
		if _, ok := trusted.Lookup(f.e.From); !ok {
			break
		}
		v.envs = append(v.envs, &f.e)
		v.idx = append(v.idx, i)
	}
	good, checked := 0, 0
	for len(v.envs)-good >= 2 {
		chunk := v.envs[good : good+min(v.size, len(v.envs)-good)]
		n := v.verify(chunk)
		checked += len(chunk)
		good += n
		if n < len(chunk) {
			batch[v.idx[good]].sig = sigBad
			break
		}
		if len(chunk) == v.size { // a full batch verified: the next may be twice as large
			v.size = min(2*v.size, maxBatch)
		}
	}
	for _, i := range v.idx[:good] {
		batch[i].sig = sigGood
	}
	r.batchVerified.Add(uint64(checked))
	clear(v.envs)
}

// verify is VerifyBatchPrefix of chunk, a chunk of splitBatch or more as
// two halves at once: the reader's verification is the one part of a
// connection's receive path that would otherwise keep to one core.
func (v *batchVerifier) verify(chunk []*wire.Envelope) int {
	n := len(chunk)
	if n < splitBatch {
		return wire.VerifyBatchPrefix(&v.b, chunk)
	}
	var first int
	done := make(chan struct{})
	go func() {
		first = wire.VerifyBatchPrefix(&v.b2, chunk[:n/2])
		close(done)
	}()
	second := wire.VerifyBatchPrefix(&v.b, chunk[n/2:])
	<-done
	if first < n/2 {
		return first
	}
	return n/2 + second
}

// batchVerifier is what one connection keeps for verifyBatch.
type batchVerifier struct {
	b, b2 identity.Batch // b2: the first half of a split batch
	envs  []*wire.Envelope
	idx   []int // envs[j] is batch[idx[j]]
	size  int   // the next batch's size: 2, doubled by each full one that verifies
}

// pollTLS reads into fr what the TLS connection c can return without
// waiting, and reports whether it returned anything. A TLS connection
// returns one record per read, where a plain socket returns all that has
// arrived: without this, a reader would take the end of each record for
// the end of its input and write acks record by record, many more
// writes for the same envelopes. The read runs under a deadline already
// passed, which returns at once when no whole record has been read from
// the socket (a deadline leaves a TLS stream in step); the caller's next
// wait (awaitFrame) sets the deadline it needs.
func (r *Router) pollTLS(c net.Conn, fr *transport.Reader) bool {
	c.SetReadDeadline(time.Now())
	return fr.Peek() == nil
}

// awaitFrame waits for the first byte of the next frame on an inbound
// connection; false means stop serving it (end of stream, a deadline,
// Close, or ackLoop stopped it).
//
// Until a connection has delivered a new valid envelope it gets only the
// frame timeout to start one, not the idle timeout. The envelope that
// authenticates it may still be committing when the wait starts: with an
// [AsyncAdmitter], ackLoop marks the connection once the admission is
// stored, after the reader has moved on. So a wait under the frame
// timeout that expires is looked at again: if the connection has been
// authenticated meanwhile, it goes on under the idle timeout, counted
// from the same start.
//
// Both count from the connection's last activity: its start or its last
// valid envelope other than an ack. Acks alone do not keep a connection.
func (r *Router) awaitFrame(c net.Conn, fr *transport.Reader, st *inConn, stopped *atomic.Bool) bool {
	start := time.Unix(0, st.active.Load())
	authed := st.authed.Load()
	for {
		idle := r.opts.FrameTimeout
		if authed {
			idle = r.opts.IdleTimeout
		}
		c.SetReadDeadline(start.Add(idle))
		// Close cancels the context before it sets every read deadline to
		// now, and ackLoop sets stopped before it does; checking after our
		// own deadline change means we cannot overwrite their deadline and
		// sleep through it.
		if r.ctx.Err() != nil || stopped.Load() {
			return false
		}
		err := fr.Peek() // a deadline leaves the stream in step: nothing is consumed
		if err == nil {
			return true
		}
		if !authed && errors.Is(err, os.ErrDeadlineExceeded) && st.authed.Load() {
			authed = true // once: the next expiry is the idle timeout's
			continue
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && r.ctx.Err() == nil {
			r.log.Debug("inbound connection read failed", "err", err)
		}
		return false
	}
}

// ackWriter serializes the ack writes of one inbound connection: ackLoop's
// batches and the reader's inline acks. After a failed write the stream
// may end in half a frame, so nothing more is written to it.
type ackWriter struct {
	mu     sync.Mutex
	c      net.Conn
	broken bool // guarded by mu
}

var errAckStreamBroken = errors.New("comms: an earlier ack write failed")

// writeLocked writes b with a write deadline d from now; w.mu is held.
func (w *ackWriter) writeLocked(b []byte, d time.Duration) error {
	if w.broken {
		return errAckStreamBroken
	}
	w.c.SetWriteDeadline(time.Now().Add(d))
	if _, err := w.c.Write(b); err != nil {
		w.broken = true
		return err
	}
	return nil
}

// ackJob is one entry of a connection's ack queue: an admission to settle
// and acknowledge, an ack the reader sealed, or word that the reader has
// no more input buffered.
type ackJob struct {
	adm     Admission // settle, then ack key.id to key.from if stored
	key     dedupKey
	ev      *Event // for Options.Observe (nil: not observed)
	claimed bool   // the admission holds a claim on its peer's connection room
	frame   []byte // a sealed ack frame
	flush   bool   // write the acks held now
}

// ackLoop settles a connection's admissions in the order they were queued
// and writes their acks. Acks are batched: they are written when the
// reader has no more input buffered, before ackLoop waits for an
// admission still committing, or once they grow large; each write has its
// own deadline, so a peer that stops reading cannot hold the connection
// past the ack timeout. A refused admission or a failed write stops the
// reader (after the others' acks are written), as a refused envelope
// does; ackLoop still settles everything queued, so no duplicate-filter
// reservation stays pending. It returns when q is closed and drained.
func (r *Router) ackLoop(c net.Conn, st *inConn, q <-chan ackJob, stopped *atomic.Bool, aw *ackWriter) {
	stop := func() {
		// serveConn checks stopped after it sets its own deadline, so it
		// cannot miss both.
		stopped.Store(true)
		c.SetReadDeadline(time.Now())
	}
	acks := ackBuf{r: r, st: st}
	flush := func() {
		if acks.empty() {
			return
		}
		d := r.opts.AckTimeout
		if r.ctx.Err() != nil {
			d = min(d, shutdownFlush) // closing: give the peer a moment, not the full timeout
		}
		aw.mu.Lock()
		err := aw.writeLocked(acks.take(), d)
		aw.mu.Unlock()
		if err != nil {
			stop()
		}
	}
	defer flush()
	for job := range q {
		switch {
		case job.adm != nil:
			if !job.adm.Ready() {
				flush() // do not hold acks while a commit runs
			}
			if r.settle(st, job, &acks) != "" {
				stop()
				continue
			}
		case job.frame != nil:
			acks.appendFrames(job.frame)
		}
		if job.flush || acks.size() >= maxPendingAcks {
			flush()
		}
	}
}

// settle waits for an admission's outcome and accounts for it. It adds
// the envelope's ack to acks if it is stored (new or stored before); a
// reason means the admission was refused for it and the connection must
// stop.
func (r *Router) settle(st *inConn, job ackJob, acks *ackBuf) (reason string) {
	stored, fresh, reason := r.admitted(job.key, job.ev, job.adm.Wait())
	if !stored {
		r.reject(reason)
		r.logRefused(reason, job.key.from)
		return reason
	}
	if fresh {
		r.authenticate(st, job.key.from) // only new envelopes authenticate
	} else if job.claimed {
		r.unclaim(st)
	}
	acks.add(job.key.from, job.key.id)
	return ""
}

// maxAcksPerEnvelope bounds the ids of one acks envelope a node seals.
const maxAcksPerEnvelope = 1024

// ackBuf collects the acks of one connection as frames: one ack envelope
// per envelope acknowledged, or, where the sender said it takes them
// (inConn.acksOK), one acks envelope per run of ids to the same sender.
// The zero value with r set seals single acks.
type ackBuf struct {
	r      *Router
	st     *inConn // nil: single acks
	to     identity.PeerID
	ids    []identity.UUID // not yet sealed, all to `to`
	frames []byte
}

// add acknowledges envelope id from `to`.
func (b *ackBuf) add(to identity.PeerID, id identity.UUID) {
	b.r.acksSent.Add(1)
	if b.st == nil || !b.st.acksOK.Load() {
		b.frames = b.r.appendAck(b.frames, to, wire.Ack(id), false)
		return
	}
	if len(b.ids) > 0 && (to != b.to || len(b.ids) == maxAcksPerEnvelope) {
		b.seal()
	}
	b.to = to
	b.ids = append(b.ids, id)
}

// seal turns the ids collected into one acks envelope.
func (b *ackBuf) seal() {
	if len(b.ids) == 0 {
		return
	}
	b.frames = b.r.appendAck(b.frames, b.to, wire.Acks(b.ids), true)
	b.ids = b.ids[:0]
}

// appendFrames adds frames sealed elsewhere.
func (b *ackBuf) appendFrames(f []byte) { b.frames = append(b.frames, f...) }

func (b *ackBuf) empty() bool { return len(b.frames) == 0 && len(b.ids) == 0 }

// size is about how many bytes the acks will take.
func (b *ackBuf) size() int { return len(b.frames) + len(b.ids)*len(identity.UUID{}) }

// take returns every ack as frames, valid until the next add; b is then
// empty.
func (b *ackBuf) take() []byte {
	b.seal()
	f := b.frames
	b.frames = b.frames[:0]
	return f
}

// detach is take for frames handed to another goroutine: b lets go of
// its buffer.
func (b *ackBuf) detach() []byte {
	f := b.take()
	b.frames = nil
	return f
}

// appendAck signs an ack or acks envelope to `to` and appends its frame
// to dst; prepared: with a prepared nonce (a meerkatd node's acks kinds).
func (r *Router) appendAck(dst []byte, to identity.PeerID, kind wire.Kind, prepared bool) []byte {
	frame, err := r.sealFrame(dst, to, kind, prepared)
	if err != nil {
		r.log.Error("cannot seal ack", "err", err)
		return dst
	}
	return frame
}

// openConn looks at the first byte of an inbound connection: a pairing
// exchange is handed to Options.Pairing, a TLS handshake is run (the
// returned connection and reader are then the TLS stream's), and a frame
// is refused on a TCP connection when Options.RefusePlaintext is set. ok
// false means the connection is done with.
func (r *Router) openConn(c net.Conn, st *inConn) (net.Conn, *transport.Reader, bool) {
	fr := transport.NewReader(c, r.opts.MaxMessageBytes)
	fr.SetBudget(r.strangers) // until the connection is authenticated (serveConn)
	// The first byte is due within the frame timeout, as it is for any
	// connection not yet authenticated.
	c.SetReadDeadline(time.Now().Add(r.opts.FrameTimeout))
	if r.ctx.Err() != nil {
		return nil, nil, false
	}
	b, err := fr.PeekByte()
	if err != nil {
		return nil, nil, false // closed or silent: nothing was said
	}
	switch {
	case b == PairingByte && r.opts.Pairing != nil:
		// The exchange sets its own deadlines; Close still ends it.
		stop := context.AfterFunc(r.ctx, func() { c.SetDeadline(time.Now()) })
		r.opts.Pairing(c, fr.Stream())
		stop()
		return nil, nil, false
	case b == transport.TLSRecordByte:
		tc, peer, err := r.tlsAccept(c, fr)
		if err != nil {
			r.reject(RejectTLS)
			if r.opts.Observe != nil { // From: the key claimed, if any; the handshake did not complete
				r.opts.Observe(Event{Type: EventRefused, Reason: RejectTLS, From: peer})
			}
			r.log.Debug("refused TLS handshake", "err", err)
			return nil, nil, false
		}
		st.tlsPeer = peer
		if r.opts.PeerConnected != nil {
			r.opts.PeerConnected(peer)
		}
		return tc, transport.NewReader(tc, r.opts.MaxMessageBytes), true
	case r.opts.RefusePlaintext && !isUnix(c):
		r.reject(RejectPlaintext)
		r.observe(EventRefused, nil, "", 0, RejectPlaintext)
		r.logRefused(RejectPlaintext, identity.PeerID{}) // no key: nothing of the connection was read
		return nil, nil, false
	}
	return c, fr, true
}

// tlsAccept runs the server side of a TLS handshake on c, whose first
// bytes fr holds, admitting only a client whose key is trusted. It returns
// the client's key even when the handshake then failed (zero if it
// presented none).
func (r *Router) tlsAccept(c net.Conn, fr *transport.Reader) (*tls.Conn, identity.PeerID, error) {
	var peer identity.PeerID
	cfg := transport.TLSServerConfig(r.tlsCert, func(pub ed25519.PublicKey) error {
		peer = identity.PeerID(pub)
		if _, ok := r.trust.Load().Lookup(peer); !ok {
			r.logUntrusted(peer)
			return errTLSUntrusted
		}
		// Anyone can sign a handshake as a small-order key (TLS's check
		// is not ours): such a key is never taken, trusted or not.
		return peer.Check()
	})
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.FrameTimeout)
	defer cancel()
	tc, err := transport.TLSServer(ctx, c, fr, cfg)
	if err != nil {
		return nil, peer, err
	}
	c.SetDeadline(time.Time{}) // the frame loop sets its own
	return tc, peer, nil
}

var errTLSUntrusted = errors.New("comms: the TLS client's key is not trusted")

// isUnix reports whether c is a Unix socket connection (which the
// plaintext policy does not concern).
func isUnix(c net.Conn) bool {
	_, ok := c.LocalAddr().(*net.UnixAddr)
	return ok
}

// PairingByte starts a pairing exchange (trust/pair's Magic). An envelope
// frame cannot start with it: its first byte is the high byte of a length
// of at most 1 MiB, always 0.
const PairingByte = 'M'

// shutdownFlush bounds the last ack write of a connection while the Router
// closes.
const shutdownFlush = time.Second

// pendingAdmission is an envelope whose admission an AsyncAdmitter may
// still be committing; its ack waits for the outcome.
type pendingAdmission struct {
	adm     Admission
	key     dedupKey
	ev      *Event // for Options.Observe (nil: not observed)
	claimed bool   // see ackJob
}

// logRefused logs an envelope refused for reason.
func (r *Router) logRefused(reason string, from identity.PeerID) {
	level, msg := slog.LevelWarn, ""
	switch reason {
	case RejectInboxFull:
		msg = "refused envelopes: inbox full (not acknowledged; the sender may retry)"
	case RejectPeerShare:
		msg = "refused envelopes: the sender holds its share of the inbox (not acknowledged; the sender may retry)"
	case RejectPeerConns:
		msg = "refused connections: the sender holds its maximum of connections"
	case RejectStore:
		level, msg = slog.LevelError, "refused envelopes: the inbox cannot be written (a full disk?); not acknowledged, the sender may retry"
	case RejectPlaintext:
		level, msg = slog.LevelInfo, "refused plaintext TCP connections (comms.tcp_plaintext = \"refuse\"): the peer must dial this node's tls:// address"
	case RejectNotServing:
		level, msg = slog.LevelInfo, "refused envelopes: no daemon serves this home's inbox (this command takes only the responses it waits for); not acknowledged, the sender retries later"
	default:
		r.log.Debug("refused envelope", "reason", reason, "key", from.String())
		return
	}
	// A sender that retries can cause these at will: at most one line a
	// minute per reason and sender, counting those left out.
	r.rejectMu.Lock()
	ok, held := r.refusedLogged.allow(refusedKey{reason, from}, time.Now())
	r.rejectMu.Unlock()
	if !ok {
		return
	}
	var args []any
	if !from.IsZero() {
		args = append(args, "key", from.String())
	}
	if held > 0 {
		args = append(args, "not_logged_before", held)
	}
	r.log.Log(context.Background(), level, msg, args...)
}

// refusedKey is what logRefused limits its lines by.
type refusedKey struct {
	reason string
	from   identity.PeerID
}

// lineLimit lets a log line about a key out at most once per
// untrustedLogEvery, counting the lines held back meanwhile; past
// maxUntrustedLogged keys its memory starts over. Its user guards it.
type lineLimit[K comparable] struct{ last map[K]*heldLines }

type heldLines struct {
	at   time.Time // when the last line went out
	held int       // lines held back since
}

// allow reports whether k's line goes out at now, and how many of k's
// lines were held back since the last one that did.
func (l *lineLimit[K]) allow(k K, now time.Time) (ok bool, held int) {
	if l.last == nil || len(l.last) >= maxUntrustedLogged {
		l.last = map[K]*heldLines{}
	}
	st := l.last[k]
	if st != nil && now.Sub(st.at) < untrustedLogEvery {
		st.held++
		return false, 0
	}
	if st == nil {
		st = &heldLines{}
		l.last[k] = st
	}
	held, st.at, st.held = st.held, now, 0
	return true, held
}

// receive checks one envelope and admits it. It reports whether to ack
// it (not for kinds that are not acknowledged, nor for an admission left
// in async), or the reason to refuse it, in which case the connection
// must be closed without an ack. st is
// the inbound connection it arrived on (nil: an outbound link): a new
// envelope authenticates it, and any valid envelope but an ack counts as
// its activity. With async non-nil, an AsyncAdmitter's admission is
// appended there instead: its ack is the caller's to write once it
// succeeded.
func (r *Router) receive(payload []byte, st *inConn, async *[]pendingAdmission) (e wire.Envelope, ack bool, reason string) {
	e, err := wire.Decode(payload)
	if err != nil {
		r.observeSt(st, EventRefused, nil, "", len(payload), RejectMalformed)
		return e, false, RejectMalformed
	}
	ack, fresh, from, reason := r.receiveDecoded(e, len(payload), st, async, sigUnchecked)
	if fresh && reason == "" {
		// Only a new envelope authenticates a connection: replaying a
		// captured one earns nothing.
		r.authenticate(st, from)
	}
	return e, ack, reason
}

// routeRefusal is why an envelope from `from` to `to` on st is refused
// before anything else about it is looked at, or "": on a TLS connection
// from another key than the certificate's (a TLS connection carries its
// peer's envelopes only), to another node, or from a key not trusted.
// The reader asks it before it decodes the kind (wire.DecodeFor), so a
// stranger's envelope costs no more than its top-level fields.
func (r *Router) routeRefusal(st *inConn, from, to identity.PeerID) string {
	switch {
	case st != nil && !st.tlsPeer.IsZero() && from != st.tlsPeer:
		return RejectTLSPeer
	case to != r.self:
		return RejectNotForUs
	}
	if _, ok := r.trust.Load().Lookup(from); !ok {
		return RejectUntrusted
	}
	return ""
}

// refuseRoute reports e, refused for routeRefusal's reason.
func (r *Router) refuseRoute(st *inConn, e *wire.Envelope, size int, reason string) {
	r.observeSt(st, EventRefused, e, "", size, reason)
	if reason == RejectUntrusted {
		r.logUntrusted(e.From)
	}
}

// receiveDecoded is receive for an envelope already decoded from size
// bytes, also returning whether the envelope was new (not a duplicate,
// and not an ack) and its sender. sig is what a batch found of its
// signature, if it was in one.
func (r *Router) receiveDecoded(e wire.Envelope, size int, st *inConn, async *[]pendingAdmission, sig sigCheck) (ack bool, fresh bool, from identity.PeerID, reason string) {
	from = e.From
	if reason := r.routeRefusal(st, e.From, e.To); reason != "" {
		r.refuseRoute(st, &e, size, reason)
		return false, false, from, reason
	}
	peer, ok := r.trust.Load().Lookup(e.From)
	if !ok { // no longer trusted since routeRefusal looked
		r.refuseRoute(st, &e, size, RejectUntrusted)
		return false, false, from, RejectUntrusted
	}
	if sig == sigBad || (sig == sigUnchecked && e.VerifyWith(&r.keys) != nil) {
		r.observeSt(st, EventRefused, &e, peer.Name, size, RejectBadSignature)
		return false, false, from, RejectBadSignature
	}
	if _, sealed := e.Kind.Box(); sealed {
		// Boxes travel only through the relay, which opens them before
		// they get here: one on a socket would be stored unopened.
		r.observeSt(st, EventRefused, &e, peer.Name, size, RejectSealed)
		return false, false, from, RejectSealed
	}
	r.seen(e.From)
	isAck := e.Kind.Type() == wire.TypeAck || e.Kind.Type() == wire.TypeAcks
	if !isAck && st != nil {
		st.active.Store(time.Now().UnixNano()) // acks alone do not keep a connection
	}
	item := Item{Type: ItemExternal, Received: time.Now(), Envelope: e, PeerName: peer.Name, Size: size}
	k := dedupKey{e.From, e.ID}
	switch {
	case isAck:
		if st != nil && st.relay {
			r.relayLateAck(e)
		} else {
			r.handleAck(e)
		}
		r.observeSt(st, EventAck, &e, peer.Name, size, "")
		return false, false, from, ""
	case e.Kind.Type() == wire.TypeResponse:
		// A response must answer a request this node sent that peer
		// (requestid.go): anything else is refused, not stored.
		if !r.solicited(e) {
			r.observeSt(st, EventRefused, &e, peer.Name, size, RejectUnsolicited)
			return false, false, from, RejectUnsolicited
		}
		// Responses are not acknowledged; a repeat is dropped.
		switch out, _ := r.dedup.reserve(k, ownerOf(st)); out {
		case dedupCommitted, dedupPending:
			r.duplicates.Add(1)
			r.observeSt(st, EventDuplicate, &e, peer.Name, size, "")
			return false, false, from, ""
		}
		claimed, ok := r.claimPeerRoom(st, e.From)
		if !ok {
			r.dedup.release(k)
			r.observeSt(st, EventRefused, &e, peer.Name, size, RejectPeerConns)
			return false, false, from, RejectPeerConns
		}
		stored, fresh, reason := r.admitted(k, r.pendingEventSt(st, &e, peer.Name, size), r.inbox.Push(item))
		if stored && !fresh && claimed {
			r.unclaim(st)
		}
		if !stored {
			return false, false, from, reason
		}
		if fresh {
			r.reqs.deliver(e) // only once it is stored: the inbox is the record
		}
		return false, fresh, from, ""
	}
	// Messages, requests and kinds we do not model are admitted and acked.
	out, same := r.dedup.reserve(k, ownerOf(st))
	switch out {
	case dedupNew:
		claimed, ok := r.claimPeerRoom(st, e.From)
		if !ok {
			r.dedup.release(k)
			r.observeSt(st, EventRefused, &e, peer.Name, size, RejectPeerConns)
			return false, false, from, RejectPeerConns
		}
		if a, ok := r.inbox.(AsyncAdmitter); ok && async != nil {
			// The caller waits for the outcome, then acks (ackLoop).
			*async = append(*async, pendingAdmission{adm: a.PushAsync(item), key: k, ev: r.pendingEventSt(st, &e, peer.Name, size), claimed: claimed})
			return false, false, from, ""
		}
		stored, isNew, reason := r.admitted(k, r.pendingEventSt(st, &e, peer.Name, size), r.inbox.Push(item))
		if stored && !isNew && claimed {
			r.unclaim(st)
		}
		if !stored {
			return false, false, from, reason
		}
		fresh = isNew
	case dedupCommitted:
		r.duplicates.Add(1) // acked again so the sender stops, not delivered twice
		r.observeSt(st, EventDuplicate, &e, peer.Name, size, "")
	case dedupPending:
		// The first copy's admission is still running and may yet fail:
		// acking now could ack something never stored.
		if same {
			// The first came on this connection: its ack, which
			// names the same id, answers this copy too (or, if it
			// fails, the connection closes and the sender sends
			// again). The frames behind it go on.
			r.duplicates.Add(1)
			r.observeSt(st, EventDuplicate, &e, peer.Name, size, "")
			return false, false, from, ""
		}
		r.observeSt(st, EventRefused, &e, peer.Name, size, RejectInFlight)
		return false, false, from, RejectInFlight
	}
	return true, fresh, from, ""
}

// admitted accounts for the outcome of admitting envelope k (err from
// the inbox): the duplicate filter, the counters and the observer (ev,
// nil if nobody observes). stored says the envelope is in the inbox (so
// it is acknowledged), fresh that it was not there before; reason why it
// was refused if not stored.
func (r *Router) admitted(k dedupKey, ev *Event, err error) (stored, fresh bool, reason string) {
	switch {
	case err == nil:
		r.dedup.commit(k)
		r.accepted.Add(1)
		r.observeSettled(ev, EventReceived, "")
		return true, true, ""
	case errors.Is(err, ErrDuplicate): // stored before (a restart emptied our memory of it)
		r.dedup.commit(k)
		r.duplicates.Add(1)
		r.observeSettled(ev, EventDuplicate, "")
		return true, false, ""
	default:
		r.dedup.release(k)
		switch {
		case errors.Is(err, inbox.ErrShare):
			reason = RejectPeerShare
		case errors.Is(err, inbox.ErrFull):
			reason = RejectInboxFull
		case errors.Is(err, ErrNotServing):
			reason = RejectNotServing
		default:
			reason = RejectStore // a full disk, an I/O error
		}
		r.observeSettled(ev, EventRefused, reason)
		return false, false, reason
	}
}

// sealFrame signs a new envelope to `to` and appends its frame to dst;
// prepared: with a prepared nonce (wire.SealPrepared).
func (r *Router) sealFrame(dst []byte, to identity.PeerID, kind wire.Kind, prepared bool) ([]byte, error) {
	seal := wire.Seal
	if prepared {
		seal = wire.SealPrepared
	}
	e, err := seal(r.kp, identity.NewUUID(), to, kind)
	if err != nil {
		return dst, err
	}
	return appendFrame(dst, &e)
}

// appendFrame appends e's frame to dst.
func appendFrame(dst []byte, e *wire.Envelope) ([]byte, error) {
	dst, start := transport.StartFrame(dst)
	dst, err := e.AppendBinary(dst)
	if err != nil {
		return dst[:start], err
	}
	if err := transport.FinishFrame(dst, start); err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// untrustedLogEvery is how often a refusal of one untrusted key is logged
// at most.
const untrustedLogEvery = time.Minute

// maxUntrustedLogged bounds the keys remembered for that rate limit; past
// it the memory starts over.
const maxUntrustedLogged = 1024

// maxUntrustedLines bounds logUntrusted's lines over all keys in each
// untrustedLogEvery: a stranger with a new key per connection gets no
// more.
const maxUntrustedLines = 10

// logUntrusted logs, at info and at most once a minute per key, that an
// envelope from a key not in the trust list was refused: the likely
// reason a peer's sends fail, and the key its owner must be given. At
// most maxUntrustedLines such lines a minute go out in all; one line
// then says how many more keys were refused meanwhile: with the next line,
// or at the end of the minute if no other stranger comes.
func (r *Router) logUntrusted(from identity.PeerID) {
	now := time.Now()
	r.rejectMu.Lock()
	log, _ := r.untrustedSeen.allow(from, now)
	hidden := 0
	if log {
		ul := &r.untrustedLog
		if now.Sub(ul.start) >= untrustedLogEvery {
			hidden = ul.hidden
			ul.start, ul.logged, ul.hidden = now, 0, 0
		}
		if ul.logged >= maxUntrustedLines {
			log = false
			ul.hidden++
			if ul.hidden == 1 {
				start := ul.start
				time.AfterFunc(untrustedLogEvery-now.Sub(start), func() { r.flushUntrusted(start) })
			}
		} else {
			ul.logged++
		}
	}
	r.rejectMu.Unlock()
	if hidden > 0 {
		r.log.Info("refused envelopes from more keys not in the trust list; their lines were left out", "keys", hidden)
	}
	if log {
		r.log.Info("refused an envelope from a key not in the trust list (trust it with meerkatd peers add, or pair)", "key", from.String())
	}
}

// flushUntrusted ends logUntrusted's minute that began at start, if it
// has not ended yet: the keys left out in it are counted in one line.
func (r *Router) flushUntrusted(start time.Time) {
	r.rejectMu.Lock()
	ul := &r.untrustedLog
	hidden := 0
	if ul.start.Equal(start) && ul.hidden > 0 {
		hidden = ul.hidden
		ul.start, ul.logged, ul.hidden = time.Now(), 0, 0
	}
	r.rejectMu.Unlock()
	if hidden > 0 && (r.ctx == nil || r.ctx.Err() == nil) {
		r.log.Info("refused envelopes from more keys not in the trust list; their lines were left out", "keys", hidden)
	}
}
