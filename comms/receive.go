package comms

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
)

// errTooManyFiles is the accept error of a process out of descriptors.
var errTooManyFiles = syscall.EMFILE

// maxPendingAcks is how many bytes of acks a connection buffers before it
// writes them even though more pipelined input is waiting.
const maxPendingAcks = 16 << 10

// serveConn reads frames from an inbound connection until EOF, an error or
// Close, acknowledging what it admits. Acks for pipelined frames are
// batched: they are written when no further input is already buffered (or
// the batch grows large), each write with its own deadline, so a peer that
// stops reading cannot hold the connection past the ack timeout.
func (r *Router) serveConn(c net.Conn, st *inConn) {
	defer r.untrack(c)
	defer c.Close()
	fr := transport.NewReader(c, r.opts.MaxMessageBytes)
	var acks []byte
	var pending []pendingAdmission
	// settle waits for the pending admissions and queues the acks of
	// those that succeeded; it reports whether all did.
	settle := func() bool {
		ok := true
		for _, p := range pending {
			err := p.wait()
			if err != nil && !errors.Is(err, ErrDuplicate) {
				r.dedup.release(p.key)
				r.reject(RejectInboxFull)
				r.observe(EventRefused, &p.item.Envelope, p.item.PeerName, p.item.Size, RejectInboxFull)
				r.log.Warn("refused envelope: inbox full (not acknowledged; the sender may retry)")
				ok = false
				continue
			}
			r.dedup.commit(p.key)
			if err != nil { // stored before (a restart emptied our memory of it)
				r.duplicates.Add(1)
				r.observe(EventDuplicate, &p.item.Envelope, p.item.PeerName, p.item.Size, "")
			} else {
				r.accepted.Add(1)
				r.observe(EventReceived, &p.item.Envelope, p.item.PeerName, p.item.Size, "")
				st.authed.Store(true) // only new envelopes authenticate
			}
			frame, err := r.sealFrame(acks, p.key.from, wire.Ack(p.key.id))
			if err != nil {
				r.log.Error("cannot seal ack", "err", err)
				continue
			}
			acks = frame
			r.acksSent.Add(1)
		}
		pending = pending[:0]
		return ok
	}
	flush := func() bool {
		if len(acks) == 0 {
			return true
		}
		d := r.opts.AckTimeout
		if r.ctx.Err() != nil {
			d = min(d, shutdownFlush) // closing: give the peer a moment, not the full timeout
		}
		c.SetWriteDeadline(time.Now().Add(d))
		_, err := c.Write(acks)
		acks = acks[:0]
		return err == nil
	}
	defer func() { // acks of admitted envelopes go out even when we stop
		settle()
		flush()
	}()
	for {
		// Until a connection has delivered a new valid envelope it gets
		// only the frame timeout to start one, not the idle timeout.
		idle := r.opts.FrameTimeout
		if st.authed.Load() {
			idle = r.opts.IdleTimeout
		}
		c.SetReadDeadline(time.Now().Add(idle))
		// Close cancels the context before it sets every read deadline to
		// now; checking after our own deadline change means we cannot
		// overwrite its deadline and sleep through shutdown.
		if r.ctx.Err() != nil {
			return
		}
		if err := fr.Peek(); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && r.ctx.Err() == nil {
				r.log.Debug("inbound connection read failed", "err", err)
			}
			return
		}
		c.SetReadDeadline(time.Now().Add(r.opts.FrameTimeout))
		payload, err := fr.ReadFrame()
		if err != nil {
			r.reject(RejectFrame)
			r.observe(EventRefused, nil, "", 0, RejectFrame)
			r.log.Debug("refused frame", "reason", RejectFrame, "err", err)
			return
		}
		ack, fresh, reason := r.receive(payload, &pending)
		if reason != "" {
			r.reject(reason)
			if reason == RejectInboxFull {
				r.log.Warn("refused envelope: inbox full (not acknowledged; the sender may retry)")
			} else {
				r.log.Debug("refused envelope", "reason", reason)
			}
			return
		}
		if fresh {
			// Only a new envelope authenticates a connection: replaying a
			// captured one earns nothing.
			st.authed.Store(true)
		}
		if ack != nil {
			acks = append(acks, ack...)
			r.acksSent.Add(1)
		}
		if fr.Buffered() == 0 || len(acks) >= maxPendingAcks || len(pending) >= maxPendingAdmissions {
			settled := settle()
			if !flush() || !settled {
				return // a refused admission closes the connection, as a refused envelope does
			}
		}
	}
}

// shutdownFlush bounds the last ack write of a connection while the Router
// closes.
const shutdownFlush = time.Second

// receive checks one envelope and admits it. It returns the ack frame to
// write (nil for kinds that are not acknowledged), whether the envelope was
// new (not a duplicate), or the reason to refuse it, in which case the
// connection must be closed without an ack.
// pendingAdmission is an envelope whose admission an AsyncAdmitter is still
// committing; its ack waits for the outcome.
type pendingAdmission struct {
	wait func() error
	key  dedupKey
	item Item // for Options.Observe
}

func (r *Router) receive(payload []byte, async *[]pendingAdmission) (ack []byte, fresh bool, reason string) {
	e, err := wire.Decode(payload)
	if err != nil {
		r.observe(EventRefused, nil, "", len(payload), RejectMalformed)
		return nil, false, RejectMalformed
	}
	if e.To != r.self {
		r.observe(EventRefused, &e, "", len(payload), RejectNotForUs)
		return nil, false, RejectNotForUs
	}
	peer, ok := r.trust.Load().Lookup(e.From)
	if !ok {
		r.observe(EventRefused, &e, "", len(payload), RejectUntrusted)
		return nil, false, RejectUntrusted
	}
	if err := e.Verify(); err != nil {
		r.observe(EventRefused, &e, peer.Name, len(payload), RejectBadSignature)
		return nil, false, RejectBadSignature
	}
	r.lastSeen.Store(e.From, time.Now())
	item := Item{Type: ItemExternal, Received: time.Now(), Envelope: e, PeerName: peer.Name, Size: len(payload)}
	k := dedupKey{e.From, e.ID}
	refuse := func(reason string) ([]byte, bool, string) {
		r.observe(EventRefused, &e, peer.Name, len(payload), reason)
		return nil, false, reason
	}
	switch e.Kind.Type() {
	case wire.TypeAck:
		r.handleAck(e)
		return nil, true, ""
	case wire.TypeResponse:
		// Responses are not acknowledged; a repeat is dropped.
		switch r.dedup.reserve(k) {
		case dedupCommitted, dedupPending:
			r.duplicates.Add(1)
			r.observe(EventDuplicate, &e, peer.Name, len(payload), "")
			return nil, false, ""
		}
		if err := r.inbox.Push(item); err != nil && !errors.Is(err, ErrDuplicate) {
			r.dedup.release(k)
			return refuse(RejectInboxFull)
		} else if err != nil {
			r.dedup.commit(k)
			r.duplicates.Add(1)
			r.observe(EventDuplicate, &e, peer.Name, len(payload), "")
			return nil, false, ""
		}
		r.dedup.commit(k)
		r.accepted.Add(1)
		r.observe(EventReceived, &e, peer.Name, len(payload), "")
		r.reqs.deliver(e) // only once it is stored: the inbox is the record
		return nil, true, ""
	}
	// Messages, requests and kinds we do not model are admitted and acked.
	switch r.dedup.reserve(k) {
	case dedupNew:
		if a, ok := r.inbox.(AsyncAdmitter); ok && async != nil {
			// The caller waits for the outcome, then acks (settle).
			*async = append(*async, pendingAdmission{wait: a.PushAsync(item), key: k, item: item})
			return nil, false, ""
		}
		err := r.inbox.Push(item)
		switch {
		case errors.Is(err, ErrDuplicate):
			r.dedup.commit(k)
			r.duplicates.Add(1)
			r.observe(EventDuplicate, &e, peer.Name, len(payload), "")
		case err != nil:
			r.dedup.release(k)
			return refuse(RejectInboxFull)
		default:
			r.dedup.commit(k)
			r.accepted.Add(1)
			r.observe(EventReceived, &e, peer.Name, len(payload), "")
			fresh = true
		}
	case dedupCommitted:
		r.duplicates.Add(1) // acked again so the sender stops, not delivered twice
		r.observe(EventDuplicate, &e, peer.Name, len(payload), "")
	case dedupPending:
		// The first copy's admission is still running and may yet fail:
		// acking now could ack something never stored.
		return refuse(RejectInFlight)
	}
	frame, err := r.sealFrame(nil, e.From, wire.Ack(e.ID))
	if err != nil {
		r.log.Error("cannot seal ack", "err", err)
		return nil, fresh, ""
	}
	return frame, fresh, ""
}

// sealFrame signs a new envelope to `to` and appends its frame to dst.
func (r *Router) sealFrame(dst []byte, to identity.PeerID, kind wire.Kind) ([]byte, error) {
	e, err := wire.Seal(r.kp, identity.NewUUID(), to, kind)
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
