package comms

import (
	"bufio"
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

// serveConn reads frames from an inbound connection until EOF, an error or
// Close, acknowledging what it admits. Acks for pipelined frames are
// batched: they are flushed when no further input is already buffered.
func (r *Router) serveConn(c net.Conn, st *inConn) {
	defer r.untrack(c)
	defer c.Close()
	fr := transport.NewReader(c, r.opts.MaxMessageBytes)
	bw := bufio.NewWriterSize(c, 4096)
	flush := func() bool {
		if bw.Buffered() == 0 {
			return true
		}
		c.SetWriteDeadline(time.Now().Add(r.opts.AckTimeout))
		return bw.Flush() == nil
	}
	defer flush() // acks of admitted envelopes go out even when we stop
	for {
		if r.ctx.Err() != nil {
			return
		}
		// Until a connection has delivered a valid envelope it gets only
		// the frame timeout to start one, not the idle timeout.
		idle := r.opts.FrameTimeout
		if st.authed.Load() {
			idle = r.opts.IdleTimeout
		}
		c.SetReadDeadline(time.Now().Add(idle))
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
			r.log.Debug("refused frame", "reason", RejectFrame, "err", err)
			return
		}
		ack, reason := r.receive(payload)
		if reason != "" {
			r.reject(reason)
			r.log.Debug("refused envelope", "reason", reason)
			return
		}
		st.authed.Store(true)
		if ack != nil {
			if _, err := bw.Write(ack); err != nil {
				return
			}
			r.acksSent.Add(1)
		}
		if fr.Buffered() == 0 && !flush() {
			return
		}
	}
}

// receive checks one envelope and admits it. It returns the ack frame to
// write (nil for kinds that are not acknowledged) or the reason to refuse
// it, in which case the connection must be closed without an ack.
func (r *Router) receive(payload []byte) (ack []byte, reason string) {
	e, err := wire.Decode(payload)
	if err != nil {
		return nil, RejectMalformed
	}
	if e.To != r.self {
		return nil, RejectNotForUs
	}
	peer, ok := r.trust.Load().Lookup(e.From)
	if !ok {
		return nil, RejectUntrusted
	}
	if err := e.Verify(); err != nil {
		return nil, RejectBadSignature
	}
	r.lastSeen.Store(e.From, time.Now())
	switch e.Kind.Type() {
	case wire.TypeAck:
		r.handleAck(e)
		return nil, ""
	case wire.TypeResponse:
		// Responses are not acknowledged; a repeat is dropped.
		k := dedupKey{e.From, e.ID}
		if !r.dedup.reserve(k) {
			r.duplicates.Add(1)
			return nil, ""
		}
		r.reqs.deliver(e)
		if err := r.inbox.Push(Item{Type: ItemExternal, Received: time.Now(), Envelope: e, PeerName: peer.Name}); err != nil {
			r.dedup.release(k)
			return nil, RejectInboxFull
		}
		r.accepted.Add(1)
		return nil, ""
	}
	// Messages, requests and kinds we do not model are admitted and acked.
	k := dedupKey{e.From, e.ID}
	if r.dedup.reserve(k) {
		if err := r.inbox.Push(Item{Type: ItemExternal, Received: time.Now(), Envelope: e, PeerName: peer.Name}); err != nil {
			r.dedup.release(k)
			return nil, RejectInboxFull
		}
		r.accepted.Add(1)
	} else {
		r.duplicates.Add(1) // acked again so the sender stops, not delivered twice
	}
	frame, err := r.sealFrame(nil, e.From, wire.Ack(e.ID))
	if err != nil {
		r.log.Error("cannot seal ack", "err", err)
		return nil, ""
	}
	return frame, ""
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
