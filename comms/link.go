package comms

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meerkatd/meerkatd/comms/wire"
	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// link is the outbound side towards one peer: one persistent connection
// (conn) carrying pipelined envelopes, or, for a peer that closes after
// every exchange, a new connection per envelope.
type link struct {
	r    *Router
	peer trust.Peer
	co   coalescer // frames held while other sends on the link seal theirs
	// acksKinds says the peer has sent acks kinds on this link's
	// current connection: a meerkatd node, whose envelopes from us are signed with prepared
	// nonces (identity.Keypair.SignIntoPrepared), and whose senders
	// prepare the next nonce while they wait for its ack.
	acksKinds atomic.Bool
	// maxAcked is the largest envelope the peer has acknowledged on this
	// link: its limit takes at least that (outConn.hint).
	maxAcked atomic.Int64

	mu        sync.Mutex // guards the fields below
	conn      *outConn
	dialing   chan struct{} // closed when the dial in progress ends
	oneShot   bool          // send one envelope per connection
	oneShotAt time.Time     // when oneShot was set; it is retried after oneShotRetry
	closed    bool
}

// oneShotCloseWindow: a connection the peer closes this soon after an ack
// (with nothing left in flight) marks a peer that reads one envelope per
// connection; an idle timeout closes much later. It is well above
// idleRead, after which an idle connection's close is seen.
const oneShotCloseWindow = 250 * time.Millisecond

// oneShotRetry is how long a link stays in one-envelope-per-connection mode
// before it tries a persistent connection again (the peer may have changed).
const oneShotRetry = 5 * time.Minute

// errConnLost means the connection ended with the envelope unacknowledged;
// send retries once on a fresh connection.
var errConnLost = errors.New("comms: connection lost")

func (l *link) send(ctx context.Context, id identity.UUID, frame []byte, wantAck bool, so sendOpts) error {
	ctx, cancel := context.WithTimeout(ctx, l.r.opts.AckTimeout)
	defer cancel()
	var lastErr error
	tries := 2
	if so.single {
		tries = 1
	}
	for attempt := 0; attempt < tries; attempt++ {
		l.mu.Lock()
		if l.oneShot && time.Since(l.oneShotAt) > oneShotRetry {
			l.oneShot = false
		}
		closed, oneShot := l.closed, l.oneShot
		l.mu.Unlock()
		if closed {
			return errLinkClosed
		}
		if oneShot {
			return l.sendOneShot(ctx, id, frame, wantAck, so.queued)
		}
		oc, err := l.connect(ctx)
		if err != nil {
			return l.offline(ctx, err)
		}
		err = oc.send(ctx, id, frame, wantAck, so.queued, so.inline)
		if !errors.Is(err, errConnLost) {
			if err != nil {
				return l.offline(ctx, err)
			}
			return nil
		}
		lastErr = err
	}
	return l.offline(ctx, lastErr)
}

// offline turns a send failure into a PeerOfflineError.
func (l *link) offline(ctx context.Context, err error) error {
	var poe *PeerOfflineError
	var dte *dialTimeoutError
	switch {
	case errors.As(err, &poe), errors.Is(err, ErrClosed), errors.Is(err, errLinkClosed):
		return err
	case errors.As(err, &dte):
		return &PeerOfflineError{Peer: l.peer.Name, Reason: dte.reason, Err: dte}
	case errors.Is(err, context.DeadlineExceeded):
		return &PeerOfflineError{Peer: l.peer.Name, Reason: OfflineTimeout}
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, errConnLost):
		return &PeerOfflineError{Peer: l.peer.Name, Reason: OfflineClosed, Plaintext: l.peer.Addr.Scheme == transport.SchemeTCP}
	case errors.Is(err, errBadAck):
		return &PeerOfflineError{Peer: l.peer.Name, Reason: OfflineBadAck, Err: err}
	case errors.Is(err, errPlaintextRefused):
		return &PeerOfflineError{Peer: l.peer.Name, Reason: OfflinePlaintext}
	case errors.As(err, new(*tlsError)):
		return &PeerOfflineError{Peer: l.peer.Name, Reason: OfflineTLS, Err: err}
	}
	return &PeerOfflineError{Peer: l.peer.Name, Reason: OfflineRefused, Err: err}
}

var errPlaintextRefused = errors.New("comms: plaintext TCP is refused")

// tlsError is a TLS handshake that failed, or a peer's TLS that refused
// this node once the handshake was over (TLS 1.3 checks the client's
// certificate after the client finished: the alert comes on the first
// read). Its text is what happened; the PeerOfflineError around it says
// "TLS handshake failed".
type tlsError struct{ err error }

func (e *tlsError) Error() string { return e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// tlsRefused is the error of a connection whose read failed with err:
// a *tlsError if the peer's TLS sent an alert (it refused this node),
// else errConnLost.
func tlsRefused(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		switch msg := op.Err.Error(); {
		case strings.Contains(msg, "certificate"), strings.Contains(msg, "access denied"):
			return &tlsError{fmt.Errorf("the peer refused this node after the handshake (%v): it may not trust this node's key", op.Err)}
		default:
			return &tlsError{fmt.Errorf("the peer's TLS ended the connection after the handshake (%v)", op.Err)}
		}
	}
	return fmt.Errorf("%w: %v", errConnLost, err)
}

// dialTimeoutError is a dial that timed out before the peer's listener
// answered: reason is OfflineConnectTimeout or OfflineTLSTimeout, and the
// error names the address. It wraps no context error, so that it is not
// taken for an ack timeout.
type dialTimeoutError struct{ reason, detail string }

func (e *dialTimeoutError) Error() string { return e.detail }

// dial connects to the peer: for tls:// it runs the handshake, accepting
// only the peer's own key; tcp:// is refused under
// Options.RefusePlaintext.
func (l *link) dial(ctx context.Context) (net.Conn, error) {
	a := l.peer.Addr
	if a.Scheme == transport.SchemeTCP && l.r.opts.RefusePlaintext {
		return nil, errPlaintextRefused
	}
	if a.Scheme == transport.SchemeTLS {
		// Anyone could answer as a small-order key (see tlsAccept).
		if err := l.peer.ID.Check(); err != nil {
			return nil, &tlsError{fmt.Errorf("the peer's key: %w", err)}
		}
	}
	c, err := l.r.opts.Dial(ctx, a)
	var ne net.Error
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) &&
		(errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()) {
		// The dial itself ran out of time (another failure that came
		// as late, a name that does not resolve, say, is reported as
		// itself).
		return nil, &dialTimeoutError{OfflineConnectTimeout, fmt.Sprintf("%s did not accept the connection in time", a)}
	}
	if err != nil || a.Scheme != transport.SchemeTLS {
		return c, err
	}
	// The handshake has a frame's time, or what is left of the send's.
	limit := l.r.opts.FrameTimeout
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl))
	}
	if limit <= 0 { // the connect took all the send's time
		c.Close()
		return nil, &dialTimeoutError{OfflineConnectTimeout, fmt.Sprintf("%s accepted the connection too late for a TLS handshake", a)}
	}
	hctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tc, err := transport.TLSClient(hctx, c, transport.TLSClientConfig(l.r.tlsCert, l.peer.ID[:]))
	if err != nil {
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			return nil, ctx.Err()
		case hctx.Err() != nil:
			// A listener that accepts and never answers: a blackhole,
			// or a service other than meerkatd that waits for its client.
			return nil, &dialTimeoutError{OfflineTLSTimeout, fmt.Sprintf("%s accepted the connection but completed no TLS handshake within %s", a, limit.Round(10*time.Millisecond))}
		}
		return nil, &tlsError{err}
	}
	return tlsOut{tc, c}, nil
}

// tlsOut is an outbound TLS connection whose Close closes the TCP
// connection at once. tls.Conn's Close first writes a close_notify alert,
// which can wait up to 5 s on a peer that stopped reading; frames are
// length-prefixed, so the alert tells the peer nothing it needs.
type tlsOut struct {
	*tls.Conn
	raw net.Conn
}

func (t tlsOut) Close() error { return t.raw.Close() }

// connect returns the live persistent connection, dialing one if needed.
// The dial runs without the link's lock (others wait for it on l.dialing),
// and Close cancels it.
func (l *link) connect(ctx context.Context) (*outConn, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, errLinkClosed
		}
		if l.conn != nil && !l.conn.isDone() {
			oc := l.conn
			l.mu.Unlock()
			return oc, nil
		}
		if wait := l.dialing; wait != nil {
			l.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					return nil, &dialTimeoutError{OfflineConnectTimeout, fmt.Sprintf("still connecting to %s", l.peer.Addr)}
				}
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		l.dialing = done
		l.mu.Unlock()

		dctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(l.r.ctx, cancel)
		c, err := l.dial(dctx)
		stop()
		cancel()

		l.mu.Lock()
		l.dialing = nil
		close(done)
		if err != nil {
			l.mu.Unlock()
			if l.r.ctx.Err() != nil {
				return nil, errLinkClosed
			}
			return nil, err
		}
		if l.closed {
			l.mu.Unlock()
			c.Close()
			return nil, errLinkClosed
		}
		oc := newOutConn(l, c)
		if !l.r.goOwned(oc.writeLoop) {
			l.mu.Unlock()
			c.Close()
			return nil, errLinkClosed
		}
		if !l.r.goOwned(oc.readLoop) {
			l.mu.Unlock()
			oc.fail(errLinkClosed)
			return nil, errLinkClosed
		}
		l.conn = oc
		l.mu.Unlock()
		return oc, nil
	}
}

// connEnded is called by an outConn when it ends; oneShot says the peer
// looks like one that reads one envelope per connection (the Rust
// reference does). A connection closed with nothing in flight is just an
// idle timeout or a restart.
func (l *link) connEnded(oc *outConn, oneShot bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == oc {
		l.conn = nil
		// Whoever answers the next connection shows again what it is:
		// the same key may now be served by an implementation that
		// never sends acks kinds, and gets deterministic signatures.
		l.acksKinds.Store(false)
	}
	if oneShot && !l.oneShot {
		l.oneShot = true
		l.oneShotAt = time.Now()
		l.r.log.Debug("peer closes after each exchange; using one connection per envelope", "peer", l.peer.Name)
	}
}

func (l *link) ackArrived(e wire.Envelope) {
	l.mu.Lock()
	oc := l.conn
	l.mu.Unlock()
	if oc != nil {
		oc.ackArrived(e)
	}
}

func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	oc := l.conn
	l.conn = nil
	l.mu.Unlock()
	if oc != nil {
		oc.fail(errLinkClosed)
	}
}

// sendOneShot delivers one envelope on its own connection, as the Rust
// reference does: dial, write, read the ack, close.
func (l *link) sendOneShot(ctx context.Context, id identity.UUID, frame []byte, wantAck bool, queued func()) error {
	c, err := l.dial(ctx)
	if err != nil {
		return l.offline(ctx, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := c.Write(frame); err != nil {
		return l.offline(ctx, err)
	}
	if !wantAck {
		queued()
		return nil
	}
	payload, err := transport.ReadFrame(c, l.r.opts.MaxMessageBytes)
	if err != nil {
		if ctx.Err() != nil {
			return l.offline(ctx, ctx.Err())
		}
		return l.offline(ctx, errConnLost)
	}
	if err := l.checkAck(payload, id); err != nil {
		return l.offline(ctx, err)
	}
	// Envelopes on separate connections can overtake each other: the
	// caller learns that this one is on its way only once it is acked,
	// so one that waits for queued keeps its order.
	queued()
	return nil
}

var errBadAck = errors.New("comms: invalid ack")

// checkAck verifies that payload is an ack of envelope id from this peer
// to us.
func (l *link) checkAck(payload []byte, id identity.UUID) error {
	return l.r.checkAck(payload, l.peer.ID, id)
}

func (l *link) validAck(e wire.Envelope) error { return l.r.validAck(e, l.peer.ID) }

// checkAck verifies that payload is a signed ack of envelope id from peer
// to this node.
func (r *Router) checkAck(payload []byte, peer identity.PeerID, id identity.UUID) error {
	e, err := wire.Open(payload)
	if err != nil {
		return fmt.Errorf("%w: %v", errBadAck, err)
	}
	if err := r.validAck(e, peer); err != nil {
		return err
	}
	var buf [1]identity.UUID
	if !slices.Contains(e.Kind.AckedIDs(buf[:0]), id) {
		return fmt.Errorf("%w: acknowledges another envelope", errBadAck)
	}
	return nil
}

// validAck checks that e is an ack or acks from peer to this node.
func (r *Router) validAck(e wire.Envelope, peer identity.PeerID) error {
	switch {
	case e.Kind.Type() != wire.TypeAck && e.Kind.Type() != wire.TypeAcks:
		return fmt.Errorf("%w: kind %q", errBadAck, e.Kind.Type())
	case e.From != peer:
		return fmt.Errorf("%w: from another key", errBadAck)
	case e.To != r.self:
		return fmt.Errorf("%w: addressed to another node", errBadAck)
	}
	return nil
}
