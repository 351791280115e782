package pair

import (
	"bufio"
	"context"
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/meerkatd/meerkatd/identity"
	"github.com/meerkatd/meerkatd/transport"
	"github.com/meerkatd/meerkatd/trust"
)

// Limits of the responder.
const (
	// ExchangeTimeout bounds one pairing exchange.
	ExchangeTimeout = 10 * time.Second
	// limitedHelloWait bounds the wait for the hello of a source over
	// its rate limit, which is answered only with ErrRateLimited.
	limitedHelloWait = time.Second
	// DefaultTTL is how long an offer stays open.
	DefaultTTL = 10 * time.Minute
	// MaxTTL bounds an offer's lifetime.
	MaxTTL = 24 * time.Hour
	// maxAttempts attempts per source at once, and one more every
	// attemptWindow/maxAttempts (see limiter); more fail at once.
	maxAttempts   = 5
	attemptWindow = time.Minute
	// maxOffers bounds the offers open at once.
	maxOffers = 64
	// maxSources bounds the sources remembered for rate limiting; past it
	// the limiter forgets the evictBatch with the most tries left.
	maxSources = 1024
	evictBatch = maxSources / 8
)

// Commit adds the other node to this node's trust list. It may rename the
// peer (a name already taken) and returns the peer as added. An error
// fails the pairing.
type Commit func(p trust.Peer) (trust.Peer, error)

// Responder holds a node's open offers and answers pairing exchanges on
// its listener.
type Responder struct {
	kp     *identity.Keypair
	name   string
	commit Commit
	now    func() time.Time

	mu       sync.Mutex
	offers   map[[16]byte]*Offer
	attempts limiter // by SourceKey
}

// NewResponder returns a Responder for the node with keypair kp and name.
func NewResponder(kp *identity.Keypair, name string, commit Commit) *Responder {
	return &Responder{kp: kp, name: name, commit: commit, now: time.Now,
		offers: map[[16]byte]*Offer{}}
}

// Offer is an open invitation to pair.
type Offer struct {
	Line        Line
	Expires     time.Time
	NameForPeer string // the name to give the peer here ("": its own name)

	id   [16]byte
	done chan struct{} // closed once paired or closed
	peer trust.Peer
	err  error
}

// Wait returns the peer added when the offer was used, or why it was not
// (ErrExpired, or ctx's error). With ErrUnanswered the peer was added
// here, but the other node may not have added this one.
func (o *Offer) Wait(ctx context.Context) (trust.Peer, error) {
	t := time.NewTimer(time.Until(o.Expires) + ExchangeTimeout) // an exchange begun in time may still finish
	defer t.Stop()
	select {
	case <-o.done:
		return o.peer, o.err
	case <-t.C:
		return trust.Peer{}, ErrExpired
	case <-ctx.Done():
		return trust.Peer{}, ctx.Err()
	}
}

// Done is closed once the offer was used, closed or swept as expired.
func (o *Offer) Done() <-chan struct{} { return o.done }

// Open creates an offer reachable at addr for ttl (0: DefaultTTL).
func (r *Responder) Open(addr transport.Addr, ttl time.Duration, nameForPeer string) (*Offer, error) {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < time.Second || ttl > MaxTTL {
		return nil, fmt.Errorf("pair: an offer lives between 1s and %s, not %s", MaxTTL, ttl)
	}
	if nameForPeer != "" {
		if _, err := trust.New(trust.Peer{Name: nameForPeer, ID: r.kp.ID(), Addr: addr}); err != nil {
			return nil, fmt.Errorf("pair: name for the peer: %w", err)
		}
	}
	code, err := NewCode()
	if err != nil {
		return nil, err
	}
	o := &Offer{Line: Line{Code: code, Addr: addr}, Expires: r.now().Add(ttl), NameForPeer: nameForPeer,
		id: code.id(), done: make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked()
	if len(r.offers) >= maxOffers {
		return nil, fmt.Errorf("%w: %d offers are open already: wait for one to be used or to expire", ErrTooManyOffers, maxOffers)
	}
	r.offers[o.id] = o
	return o, nil
}

// Close withdraws an offer that was not used.
func (r *Responder) Close(o *Offer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.offers[o.id] == o {
		delete(r.offers, o.id)
		o.err = ErrWithdrawn // to its waiter; to an initiator it is no offer now
		close(o.done)
	}
}

// sweepLocked drops expired offers.
func (r *Responder) sweepLocked() {
	now := r.now()
	for id, o := range r.offers {
		if !now.Before(o.Expires) {
			delete(r.offers, id)
			o.err = ErrExpired
			close(o.done)
		}
	}
}

// attempt counts an attempt from source and reports whether it may go
// ahead (see limiter).
func (r *Responder) attempt(source string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts.allow(SourceKey(source), r.now())
}

// Serve runs the responder's side of one exchange on c, whose first bytes
// (Magic included) are read from rd. source identifies the other end for
// rate limiting: an IP address (counted by [SourceKey]: IPv6 per /64), or
// for a Unix socket [LocalSource], with ":" and the uid when it is known.
func (r *Responder) Serve(c net.Conn, rd io.Reader, source string) error {
	c.SetDeadline(time.Now().Add(ExchangeTimeout))
	defer c.SetDeadline(time.Time{})
	// A buffer of our own (not rd's, which may be larger): a message
	// longer than maxMsg is refused.
	cn := &conn{r: bufio.NewReaderSize(struct{ io.Reader }{rd}, maxMsg), w: c}
	magic := make([]byte, len(Magic))
	if _, err := io.ReadFull(cn.r, magic); err != nil || string(magic) != Magic {
		return fmt.Errorf("%w: bad greeting", ErrProtocol)
	}
	// Every attempt counts, when it starts: parallel connections get no
	// more tries than sequential ones.
	if !r.attempt(source) {
		// Read the hello, so the answer is read in turn; a client that
		// sent it with the greeting, as every initiator does, is not
		// kept waiting, and one that holds it back is not kept
		// ExchangeTimeout either.
		c.SetReadDeadline(time.Now().Add(limitedHelloWait))
		cn.recv()
		cn.send(msg{Error: ErrRateLimited.Error()})
		return ErrRateLimited
	}
	return r.exchange(cn, source)
}

// NATSSource is the source of exchanges carried through NATS: they share
// one rate limit, and the other node must be reached through NATS too.
const NATSSource = "nats"

// LocalSource is the source of connections over Unix sockets; callers that
// know the connecting user append ":" and its uid, so local users are
// limited separately.
const LocalSource = "local"

func (r *Responder) exchange(cn *conn, source string) error {
	local := isLocal(source)
	hello, err := cn.recv()
	if err != nil {
		return err
	}
	refuse := func(e error) error {
		cn.send(msg{Error: e.Error()})
		return e
	}
	var id [16]byte
	if b, err := hex.DecodeString(hello.Offer); err != nil || len(b) != len(id) {
		return refuse(fmt.Errorf("%w: offer id", ErrProtocol))
	} else {
		copy(id[:], b)
	}
	initKey, err := identity.ParsePeerID(hello.Key)
	if err != nil {
		return refuse(fmt.Errorf("%w: key: %v", ErrProtocol, err))
	}
	initAddr, err := transport.ParseAddr(hello.Addr)
	if err != nil {
		return refuse(fmt.Errorf("%w: address: %v", ErrProtocol, err))
	}
	switch {
	case source == NATSSource && initAddr.Scheme != transport.SchemeNATS:
		// A node that came through NATS may be anywhere; it is reached
		// the way it came.
		return refuse(fmt.Errorf("%w: a node pairing through NATS must be reached through NATS (address nats:, not a socket or TCP address)", ErrProtocol))
	case source != NATSSource && !local && !initAddr.OverTCP():
		// A node that came over TCP is on another host: a Unix socket
		// path would name something on ours.
		return refuse(fmt.Errorf("%w: a node pairing over TCP must give a TCP address", ErrProtocol))
	}
	if len(hello.Nonce) != nonceSize {
		return refuse(fmt.Errorf("%w: nonce", ErrProtocol))
	}
	r.mu.Lock()
	o := r.offers[id]
	expired := o != nil && !r.now().Before(o.Expires)
	r.sweepLocked()
	r.mu.Unlock()
	switch {
	case expired:
		return refuse(ErrExpired)
	case o == nil:
		return refuse(ErrNoOffer)
	}
	if initKey == r.kp.ID() {
		return refuse(fmt.Errorf("%w: a node cannot pair with itself", ErrProtocol))
	}
	key, err := macKey(o.Line.Code)
	if err != nil {
		return refuse(err)
	}
	nonce, err := newNonce()
	if err != nil {
		return refuse(err)
	}
	t := transcript{offer: id, initKey: initKey, respKey: r.kp.ID(), initName: hello.Name, initAddr: hello.Addr,
		respName: r.name, initNonce: hello.Nonce, respNonce: nonce}
	sum := t.sum()
	if err := cn.send(msg{Key: r.kp.ID().String(), Name: r.name, Nonce: nonce,
		MAC: proofMAC(key, roleResponder, sum), Sig: r.kp.Sign(signed(roleResponder, sum))}); err != nil {
		return err
	}
	proof, err := cn.recv()
	if err != nil {
		return err
	}
	if proof.Error != "" {
		return fmt.Errorf("%w: %s", ErrRefused, proof.Error)
	}
	if !hmac.Equal(proof.MAC, proofMAC(key, roleInitiator, sum)) || !initKey.Verify(signed(roleInitiator, sum), proof.Sig) {
		return refuse(ErrBadProof)
	}
	// Proven. The offer is used now, whatever follows — unless it
	// expired or was used meanwhile.
	r.mu.Lock()
	switch {
	case r.offers[id] != o:
		r.mu.Unlock()
		return refuse(ErrNoOffer) // used or closed a moment ago
	case !r.now().Before(o.Expires):
		r.sweepLocked()
		r.mu.Unlock()
		return refuse(ErrExpired)
	}
	delete(r.offers, id)
	r.mu.Unlock()
	name := o.NameForPeer
	if name == "" {
		name = trust.UsableName(hello.Name)
	}
	peer, err := r.commit(trust.Peer{Name: name, ID: initKey, Addr: initAddr})
	// Answer before the offer reports its outcome: its waiter may stop
	// the node, and with it this connection, as soon as it does.
	var answered error
	if err != nil {
		answered = refuse(fmt.Errorf("pair: cannot trust the peer here: %w", err))
	} else if sendErr := cn.send(msg{OK: true}); sendErr != nil {
		err = fmt.Errorf("%w; %s (%s) is trusted here: %v", ErrUnanswered, peer.Name, peer.ID, sendErr)
		answered = err
	}
	o.peer, o.err = peer, err
	close(o.done)
	return answered
}

// Accept runs the initiator's side: it dials line.Addr, proves it knows
// the code, checks that the other side does too and holds the key it
// presents, and once the other side has trusted it, trusts the other side
// through commit (named nameForPeer, or the other node's own name).
// selfAddr is where the other node is to reach this one.
func Accept(ctx context.Context, kp *identity.Keypair, selfName string, selfAddr transport.Addr, line Line,
	nameForPeer string, plan, commit Commit) (trust.Peer, error) {
	ctx, cancel := context.WithTimeout(ctx, ExchangeTimeout)
	defer cancel()
	c, err := transport.Dial(ctx, line.Addr)
	if err != nil {
		return trust.Peer{}, fmt.Errorf("%w %s (is the offering node running?): %w", ErrUnreachable, line.Addr, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	return accept(c, kp, selfName, selfAddr, line, nameForPeer, plan, commit)
}

// AcceptConn is [Accept] over a connection the caller opened to the
// offering node (through NATS, say) instead of dialling line.Addr. It
// closes c.
func AcceptConn(ctx context.Context, c net.Conn, kp *identity.Keypair, selfName string, selfAddr transport.Addr, line Line,
	nameForPeer string, plan, commit Commit) (trust.Peer, error) {
	ctx, cancel := context.WithTimeout(ctx, ExchangeTimeout)
	defer cancel()
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	return accept(c, kp, selfName, selfAddr, line, nameForPeer, plan, commit)
}

func accept(c net.Conn, kp *identity.Keypair, selfName string, selfAddr transport.Addr, line Line,
	nameForPeer string, plan, commit Commit) (trust.Peer, error) {
	cn := &conn{r: bufio.NewReaderSize(c, maxMsg), w: c}
	// Until the other side has answered, a failure to write or read says
	// nothing answers pairings there (a listener of something else, a
	// node that hangs): the address cannot be used, as when nothing
	// listens. Nothing was trusted on either side.
	silent := func(err error) error {
		var ne net.Error
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &ne) {
			return err // not the connection's: a protocol error, or the conn's own (NATS: no offer)
		}
		return fmt.Errorf("%w %s: no pairing answer there (is a meerkatd node offering at that address?): %w", ErrUnreachable, line.Addr, err)
	}
	if _, err := io.WriteString(c, Magic); err != nil {
		return trust.Peer{}, silent(err)
	}
	nonce, err := newNonce()
	if err != nil {
		return trust.Peer{}, err
	}
	id := line.Code.id()
	if err := cn.send(msg{Offer: hex.EncodeToString(id[:]), Key: kp.ID().String(), Name: selfName, Addr: selfAddr.String(), Nonce: nonce}); err != nil {
		return trust.Peer{}, silent(err)
	}
	ch, err := cn.recv()
	if errors.Is(err, ErrProtocol) {
		// The first answer is not a pairing message at all (an HTTP
		// server, another protocol): as unusable as no answer.
		return trust.Peer{}, fmt.Errorf("%w %s: what answers there is no meerkatd node (is a meerkatd node offering at that address?): %w", ErrUnreachable, line.Addr, err)
	}
	if err != nil {
		return trust.Peer{}, silent(err)
	}
	if ch.Error != "" {
		return trust.Peer{}, remoteError(ch.Error)
	}
	respKey, err := identity.ParsePeerID(ch.Key)
	if err != nil || len(ch.Nonce) != nonceSize {
		return trust.Peer{}, fmt.Errorf("%w: challenge", ErrProtocol)
	}
	key, err := macKey(line.Code)
	if err != nil {
		return trust.Peer{}, err
	}
	t := transcript{offer: id, initKey: kp.ID(), respKey: respKey, initName: selfName, initAddr: selfAddr.String(),
		respName: ch.Name, initNonce: nonce, respNonce: ch.Nonce}
	sum := t.sum()
	if !hmac.Equal(ch.MAC, proofMAC(key, roleResponder, sum)) || !respKey.Verify(signed(roleResponder, sum), ch.Sig) {
		cn.send(msg{Error: ErrBadProof.Error()})
		return trust.Peer{}, ErrBadProof
	}
	name := nameForPeer
	if name == "" {
		name = trust.UsableName(ch.Name)
	}
	// Plan before proving: a peer this side cannot trust fails now, with
	// no trust change on either side.
	want := trust.Peer{Name: name, ID: respKey, Addr: line.Addr}
	if _, err := trust.New(want); err != nil {
		cn.send(msg{Error: "the initiator cannot use that name"})
		return trust.Peer{}, fmt.Errorf("pair: the name for the peer: %w (pass another with --name)", err)
	}
	if plan != nil {
		var err error
		if want, err = plan(want); err != nil {
			cn.send(msg{Error: "the initiator cannot trust this peer"})
			return trust.Peer{}, fmt.Errorf("pair: %w", err)
		}
	}
	if err := cn.send(msg{MAC: proofMAC(key, roleInitiator, sum), Sig: kp.Sign(signed(roleInitiator, sum))}); err != nil {
		return trust.Peer{}, err
	}
	done, err := cn.recv()
	if err != nil {
		return trust.Peer{}, fmt.Errorf("pair: no answer after the proof (the other side may have trusted this node; check its peers): %w", err)
	}
	if !done.OK {
		return trust.Peer{}, remoteError(done.Error)
	}
	p, err := commit(want)
	if err != nil {
		return trust.Peer{}, fmt.Errorf("pair: the other node now trusts this one, but trusting it here failed: %w", err)
	}
	return p, nil
}

// oldRateLimited is ErrRateLimited's text in earlier versions, which a
// node not yet upgraded still sends.
const oldRateLimited = "pair: too many failed attempts from here; wait a minute"

// remoteError turns the other side's error text back into our error
// values where it is one of them.
func remoteError(s string) error {
	for _, e := range []error{ErrNoOffer, ErrExpired, ErrBadProof, ErrRateLimited} {
		if s == e.Error() {
			return e
		}
	}
	if s == oldRateLimited {
		return ErrRateLimited
	}
	return fmt.Errorf("%w: %s", ErrRefused, s)
}
